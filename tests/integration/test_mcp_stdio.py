"""`vllm-tune mcp` as a real subprocess: stdio and loopback HTTP transports, plus the public-bind guard."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from support.vllm_server import VllmServer, free_port, stop_process_group

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

KB_URI = "kb://entries/triage.preemption-kv-thrash"


def _env_without_token() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "VLLM_TUNE_MCP_TOKEN"}


async def test_stdio_round_trip() -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "vllm_tune.cli", "mcp"])
    with anyio.fail_after(60):
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "search_knowledge" in names
            resource = await client.read_resource(KB_URI)
            text = " ".join(getattr(c, "text", "") for c in resource.contents)
            assert "triage.preemption-kv-thrash" in text or "preempt" in text.lower()
            result = await client.call_tool("search_knowledge", {"query": "preemptions kv cache thrash"})
            assert not result.is_error
            assert result.structured_content is not None
            assert result.structured_content["hits"][0]["id"] == "triage.preemption-kv-thrash"


async def test_http_transport_on_loopback() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_tune.cli", "mcp", "--transport", "http", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env_without_token(), start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "MCP HTTP server did not open its port"
                await anyio.sleep(0.2)
        with anyio.fail_after(30):
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                names = {t.name for t in (await client.list_tools()).tools}
        assert "search_knowledge" in names
    finally:
        stop_process_group(proc, grace_s=5)  # type: ignore[arg-type]


def test_public_bind_without_token_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_tune.cli", "mcp", "--transport", "http", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True, text=True, env=_env_without_token(), timeout=30,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


async def test_core_tools_over_stdio_against_a_real_server(vllm_server: VllmServer) -> None:
    """An assistant's first three calls, end to end: diagnose a live server, plan, check MoE coverage."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "vllm_tune.cli", "mcp"])
    with anyio.fail_after(120):
        async with Client(params) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"diagnose_metrics", "recommend_parallelism", "tune_moe", "run_benchmark"} <= set(tools)
            assert tools["diagnose_metrics"].annotations is not None
            assert tools["diagnose_metrics"].annotations.read_only_hint is True
            assert tools["run_benchmark"].annotations is not None
            assert tools["run_benchmark"].annotations.read_only_hint is False

            diag = await client.call_tool("diagnose_metrics", {"url": vllm_server.url, "window_s": 2,
                                                               "sample_interval_s": 0.5})
            assert not diag.is_error, diag.content
            assert diag.structured_content is not None
            assert diag.structured_content["server"]["version"] == "0.32.0"
            assert diag.structured_content["verdict"].startswith("idle")

            plan = await client.call_tool("recommend_parallelism", {"model": "meta-llama/Llama-3.1-8B-Instruct",
                                                                    "gpu": "H100", "gpus": 2, "offline": True})
            assert not plan.is_error, plan.content
            assert plan.structured_content is not None
            assert plan.structured_content["candidates"][0]["command"].startswith("vllm serve ")

            moe = await client.call_tool("tune_moe", {"model": "mistralai/Mixtral-8x7B-Instruct-v0.1",
                                                      "gpu": "H200", "tp": 2, "offline": True})
            assert not moe.is_error, moe.content
            assert moe.structured_content is not None
            assert moe.structured_content["config_file_name"] == "E=8,N=7168,device_name=NVIDIA_H200.json"
