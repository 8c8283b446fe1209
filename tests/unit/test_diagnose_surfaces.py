"""The CLI and MCP surfaces of diagnose_metrics, and the live scrape loop (no server needed)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from mcp import Client

from vllm_tune.cli.main import main
from vllm_tune.server.app import build_server
from vllm_tune.tools.diagnose.collect import scrape_window

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "captures"


def test_cli_json_for_two_files(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["diagnose", "--metrics-file", str(CAPTURES / "kv_thrash.before.prom"), "--metrics-file",
               str(CAPTURES / "kv_thrash.after.prom"), "--window", "23.87", "--max-num-seqs", "4", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bottleneck"] == "triage.preemption-kv-thrash"
    assert out["findings"][0]["evidence"][0]["signal"] == "preemptions_per_request"
    assert out["window_s"] == 23.87 and out["slo_source"] == "default"


def test_cli_human_report_with_slo(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["diagnose", "--metrics-file", str(CAPTURES / "long_prompts.before.prom"), "--metrics-file",
               str(CAPTURES / "long_prompts.after.prom"), "--window", "1.46", "--slo", "ttft=300",
               "--log-file", str(CAPTURES / "long_prompts.log")])
    text = capsys.readouterr().out
    assert rc == 0
    assert "triage.ttft-high-queue-empty" in text and "SLO (your SLO, judged at p90): ttft violated" in text


def test_cli_takes_vllm_goodput_form_and_a_percentile(capsys: pytest.CaptureFixture[str]) -> None:
    files = ["--metrics-file", str(CAPTURES / "kv_thrash.before.prom"), "--metrics-file",
             str(CAPTURES / "kv_thrash.after.prom"), "--window", "23.87"]
    assert main(["diagnose", *files, "--goodput", "ttft:20000", "tpot:50", "--slo-percentile", "p99", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["slo_percentile"] == 99 and set(out["slo"]) == {"ttft", "tpot"}
    assert out["slo"]["ttft"]["status"] == "violated" and out["slo"]["ttft"]["percentile"] == 99
    assert out["targets_used"]["ttft"] == "20000 ms at p99 (your SLO)"
    assert main(["diagnose", *files, "--slo", "ttft=20000,tpot=50", "--slo-percentile", "99", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["slo"] == out["slo"]


@pytest.mark.parametrize("argv, code, fragment", [
    (["diagnose", "--slo", "ttft=5", "--goodput", "ttft:5", "--metrics-file", __file__], 2, "give the targets once"),
    (["diagnose", "--slo-percentile", "p97", "--metrics-file", __file__], 2, "judges at p50, p90, p95 or p99"),
    (["capture", "http://127.0.0.1:9", "--window", "1", "--out", "/tmp/vllm-tune-test-capture"], 3, "cannot reach"),
    (["capture", "http://127.0.0.1:9", "--window", "0"], 2, "--window must be between 0 and"),
    (["diagnose"], 2, "nothing to diagnose"),
    (["diagnose", "--metrics-file", "/nonexistent.prom"], 2, "cannot read metrics file"),
    (["diagnose", "--metrics-file", __file__], 2, "not valid Prometheus text format"),
    (["diagnose", "--slo", "ttft=fast", "--metrics-file", __file__], 2, "is not a number"),
    (["diagnose", "--slo", "latency=3", "--metrics-file", __file__], 2, "unknown SLO key"),
    (["diagnose", "http://127.0.0.1:9"], 3, "cannot reach http://127.0.0.1:9/metrics"),
    (["diagnose", "--prometheus", "http://127.0.0.1:9", "--window", "60"], 3, "cannot reach"),
    (["diagnose", "--metrics-file", str(CAPTURES / "overload.after.prom"), "--metrics-file",
      str(CAPTURES / "overload.before.prom")], 2, "pass the earlier scrape first"),
    (["diagnose", "--metrics-file", str(CAPTURES / "overload.after.prom"), "--model", "nope"], 2,
     "model 'nope' is not in the metrics"),
])
def test_cli_errors_are_one_line_with_exit_code(argv: list[str], code: int, fragment: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert fragment in err and "Traceback" not in err and len(err.splitlines()) == 1


@pytest.mark.anyio
async def test_mcp_tool_is_annotated_and_diagnoses_texts() -> None:
    async with Client(build_server(), raise_exceptions=True) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        tool = tools["diagnose_metrics"]
        ann = tool.annotations
        assert ann is not None
        assert (ann.read_only_hint, ann.destructive_hint, ann.idempotent_hint, ann.open_world_hint) == (
            True, False, False, True)
        assert {"url", "prometheus_url", "metrics", "log_text", "slo", "options"} <= set(
            tool.input_schema["properties"])
        assert "serve_flags" in tool.input_schema["properties"]["options"]["description"]
        metrics = [{"name": f"overload.{e}", "text": (CAPTURES / f"overload.{e}.prom").read_text()}
                   for e in ("before", "after")]
        result = await client.call_tool("diagnose_metrics", {"metrics": metrics, "window_s": 21.39,
                                                             "serve_flags": {"max_num_seqs": 2}})
        assert not result.is_error
        data = result.structured_content
        assert data is not None and data["bottleneck"] == "triage.ttft-high-queue-growing"


@pytest.mark.anyio
async def test_mcp_tool_takes_the_shared_slo_vocabulary() -> None:
    metrics = [{"name": f"steady_light.{e}", "text": (CAPTURES / f"steady_light.{e}.prom").read_text()}
               for e in ("before", "after")]
    async with Client(build_server(), raise_exceptions=True) as client:
        tool = {t.name: t for t in (await client.list_tools()).tools}["diagnose_metrics"]
        assert tool.input_schema["properties"]["slo_percentile"]["enum"] == [50, 90, 95, 99]
        results = []
        for slo in ({"itl": 5}, {"itl_ms": 5}):
            result = await client.call_tool("diagnose_metrics", {"metrics": metrics, "window_s": 2.03, "slo": slo,
                                                                 "slo_percentile": 95})
            assert not result.is_error, result.content
            results.append(result.structured_content)
    a, b = results
    assert a is not None and b is not None and a["slo"] == b["slo"]
    assert a["bottleneck"] == "triage.tpot-high-decode-bound" and a["slo"]["itl"]["percentile"] == 95
    assert a["latency"]["queue"]["p95"]["value_ms"] is None  # a bound, not a number
    assert any("ITL p95" in d for d in a["findings"][0]["decided_by"])


@pytest.mark.anyio
async def test_mcp_tool_never_auto_allows_a_remote_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_TUNE_ALLOWED_TARGETS", raising=False)
    async with Client(build_server()) as client:
        result = await client.call_tool("diagnose_metrics", {"url": "http://10.255.0.1:8000", "window_s": 1})
        assert result.is_error
        assert "not allowed" in result.content[0].text  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_scrape_window_keeps_what_it_measured_when_a_scrape_fails() -> None:
    texts = [(CAPTURES / "overload.before.prom").read_text(), None, (CAPTURES / "overload.after.prom").read_text()]
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        i = calls["n"]
        calls["n"] += 1
        body = texts[min(i, len(texts) - 1)]
        return httpx.Response(500) if body is None else httpx.Response(200, text=body)

    seen: list[tuple[float, float, str]] = []

    async def progress(done: float, total: float, message: str) -> None:
        seen.append((done, total, message))

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        window = await scrape_window(client, "http://vllm.test", window_s=0.6, interval_s=0.2, progress=progress)
    assert window.kind == "window" and window.before is not None
    assert window.counter("request_success") == 40.0  # first and last good scrapes
    assert any("failed" in c for c in window.caveats)
    assert seen and seen[-1][1] == 0.6


@pytest.mark.anyio
async def test_mcp_diagnoses_saved_capture_files_under_the_roots(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from mcp import Client

    from vllm_tune.server.app import build_server

    samples = Path(__file__).resolve().parents[2] / "knowledge" / "samples" / "overload"
    inside = tmp_path / "captures"
    shutil.copytree(samples, inside)
    monkeypatch.setenv("VLLM_TUNE_FILE_ROOTS", str(inside))
    async with Client(build_server()) as client:
        out = await client.call_tool("diagnose_metrics", {
            "metrics_files": [str(inside / "before.prom"), str(inside / "after.prom")],
            "log_file": str(inside / "server.log")})
        assert not out.is_error, out.content
        data = out.structured_content or {}
        assert data["window_s"] == pytest.approx(21.39)  # from capture.json beside the files
        assert any(f["id"].startswith("triage.") for f in data["findings"])
        refused = await client.call_tool("diagnose_metrics", {"metrics_files": [str(samples / "before.prom")]})
        assert refused.is_error and "not under the allowed file roots" in str(refused.content)
