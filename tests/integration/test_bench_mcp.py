"""run_benchmark over MCP: schema, annotations, progress, background runs with status/results/cancel."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, types
from support_bench import StreamServer, start_stream_server

from vllm_tune.server.app import build_server

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture(scope="module")
def server() -> Iterator[StreamServer]:
    with start_stream_server(10, 2) as srv:
        yield srv


async def test_tools_are_listed_with_honest_annotations() -> None:
    async with Client(build_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    run = tools["run_benchmark"]
    assert run.annotations is not None
    assert (run.annotations.read_only_hint, run.annotations.destructive_hint, run.annotations.idempotent_hint,
            run.annotations.open_world_hint) == (False, False, False, True)
    props = run.input_schema["properties"]
    assert {"url", "concurrency", "rate", "slo", "confirm", "background", "search_capacity"} <= set(props)
    assert run.input_schema["required"] == ["url"]
    for name in ("benchmark_status", "benchmark_results", "cancel_benchmark"):
        assert tools[name].input_schema["required"] == ["run_id"]


async def test_inline_run_reports_progress(server: StreamServer, tmp_path: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with Client(build_server(), raise_exceptions=True) as client:
        result = await client.call_tool("run_benchmark", {
            "url": server.url, "rate": 25, "num_prompts": 50, "input_len": 8, "output_len": 8,
            "save_result": str(tmp_path), "warmup_requests": 0}, progress_callback=on_progress)
    assert not result.is_error
    data: dict[str, Any] = result.structured_content or {}
    assert data["state"] == "completed"
    assert data["result"]["completed"] == 50 and "p99_ttft_ms" in data["result"]
    assert seen, "no progress notifications"
    values = [p for p, _, _ in seen]
    assert values == sorted(values) and seen[-1][1] == 50


async def test_background_run_status_results_and_cancel(server: StreamServer, tmp_path: Path) -> None:
    async with Client(build_server(), raise_exceptions=True) as client:
        started = await client.call_tool("run_benchmark", {
            "url": server.url, "rate": 10, "num_prompts": 300, "input_len": 8, "output_len": 8,
            "save_result": str(tmp_path), "background": True, "warmup_requests": 0})
        info: dict[str, Any] = started.structured_content or {}
        assert info["state"] == "running"
        run_id = info["run_id"]
        ref = {"run_id": run_id, "save_result": str(tmp_path)}
        status: dict[str, Any] = {}
        for _ in range(100):
            await asyncio.sleep(0.1)
            status = (await client.call_tool("benchmark_status", ref)).structured_content or {}
            if status.get("done", 0) >= 5:
                break
        assert status["state"] == "running" and status["done"] >= 5
        early = await client.call_tool("benchmark_results", ref)
        assert early.is_error  # still running
        cancel = (await client.call_tool("cancel_benchmark", ref)).structured_content or {}
        assert cancel["cancelled"] is True
        for _ in range(50):
            await asyncio.sleep(0.1)
            status = (await client.call_tool("benchmark_status", ref)).structured_content or {}
            if status["state"] != "running":
                break
        assert status["state"] == "cancelled"
        results = (await client.call_tool("benchmark_results", ref)).structured_content or {}
        assert 5 <= results["result"]["completed"] < 300
        assert results["result"]["client_check"]["stop_reason"] == "cancelled"


async def test_non_loopback_without_confirm_is_a_tool_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_TUNE_ALLOWED_TARGETS", "10.9.8.7")
    async with Client(build_server()) as client:
        result = await client.call_tool("run_benchmark", {"url": "http://10.9.8.7:8000", "rate": 1,
                                                          "save_result": str(tmp_path), "background": True})
    assert result.is_error
    assert "confirm" in str(result.content)


async def test_unknown_run_id_is_a_clear_error(tmp_path: Path) -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("benchmark_status", {"run_id": "../../etc"})
        assert result.is_error
        result = await client.call_tool("benchmark_status", {"run_id": "20260101-000000-abcdef",
                                                              "save_result": str(tmp_path)})
        assert result.is_error


def _own_address() -> str | None:
    """A non-loopback address of this machine (no packet is sent), or None without a route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
        except OSError:
            return None
        addr = str(s.getsockname()[0])
    return None if addr.startswith("127.") else addr


@pytest.mark.parametrize("answer", ["accept", "decline"])
async def test_non_loopback_target_is_confirmed_through_elicitation(
        answer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    addr = _own_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback address")
    with socket.socket() as probe:  # a port nothing listens on: the run fails fast once it is allowed to start
        probe.bind((addr, 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("VLLM_TUNE_ALLOWED_TARGETS", addr)
    asked: list[str] = []

    async def respond(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(getattr(params, "message", ""))
        return types.ElicitResult(action=answer, content={"confirm": True} if answer == "accept" else None)

    async with Client(build_server(), elicitation_callback=respond, mode="legacy") as client:
        result = await client.call_tool("run_benchmark", {"url": f"http://{addr}:{port}", "rate": 5,
                                                          "num_prompts": 10, "save_result": str(tmp_path)})
    assert asked and addr in asked[0] and "5 req/s, 10 requests" in asked[0]
    assert result.is_error
    text = str(result.content)
    if answer == "accept":
        assert "cannot reach" in text and "confirm" not in text  # past the confirmation, stopped by the target
    else:
        assert "needs explicit confirmation" in text


async def test_target_outside_the_allowlist_is_refused_without_asking(tmp_path: Path) -> None:
    asked: list[str] = []

    async def respond(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(getattr(params, "message", ""))
        return types.ElicitResult(action="accept", content={"confirm": True})

    async with Client(build_server(), elicitation_callback=respond, mode="legacy") as client:
        result = await client.call_tool("run_benchmark", {"url": "http://10.9.8.7:8000", "rate": 1,
                                                          "save_result": str(tmp_path)})
    assert result.is_error and not asked
    assert "allow" in str(result.content).lower()


async def test_capacity_search_returns_its_plots_as_images(server: StreamServer, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    async with Client(build_server(), raise_exceptions=True) as client:
        result = await client.call_tool("run_benchmark", {
            "url": server.url, "input_len": 8, "output_len": 4, "save_result": str(tmp_path),
            "search_capacity": True, "slo": {"ttft": 1000}, "search_prompts": 20, "search_max": 20.0,
            "warmup_requests": 0, "plot": True})
    assert not result.is_error and result.structured_content is not None
    plots = result.structured_content["plots"]
    images = [c for c in result.content if isinstance(c, types.ImageContent)]
    assert len(plots) >= 2 and len(images) == len(plots)
    for path, image in zip(plots, images, strict=True):
        assert image.mime_type == "image/png"
        assert base64.b64decode(image.data) == Path(path).read_bytes()
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cap = result.structured_content["capacity"]
    assert cap["capacity"] == 20.0 and any(p["phase"] == "probe" for p in cap["curve"])
