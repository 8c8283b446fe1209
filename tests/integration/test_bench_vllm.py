"""run_benchmark against the real vLLM CPU server of the test suite, side by side with `vllm bench serve`.

Tolerances are wide on purpose: two shared cores make step times vary run to run (FEASIBILITY.md);
counts and token totals must agree exactly, timings within run-to-run noise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

INPUT_LEN, OUTPUT_LEN, PROMPTS, RATE = 64, 32, 50, 10.0
PER_REQUEST_ARRAYS = {"latencies", "queue_times"}


def vllm_bench_cmd(url: str, model: str, tokenizer: Path, out_dir: Path) -> list[str]:
    from support.vllm_env import VLLM_CLI, ensure_vllm_python  # the test-infrastructure helpers

    return [str(ensure_vllm_python()), str(VLLM_CLI), "bench", "serve", "--backend", "vllm", "--base-url", url,
            "--model", model, "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
            "--num-prompts", str(PROMPTS), "--request-rate", str(RATE), "--ignore-eos", "--save-result",
            "--result-dir", str(out_dir), "--result-filename", "f.json", "--percentile-metrics",
            "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99", "--disable-tqdm"]


VLLM_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


async def _vllm_bench_beside_ours(url: str, model: str, tokenizer: Path, tmp: Path) -> tuple[dict[str, Any], Any]:
    """Both clients send their schedules to the server at the same time, so they measure the same server
    under the same load (each runs into the other's requests); timings taken at different moments on a
    shared machine would compare the machine's moods, not the clients."""
    import asyncio

    out_dir = tmp / "vllm"
    proc = await asyncio.create_subprocess_exec(*vllm_bench_cmd(url, model, tokenizer, out_dir), env=VLLM_ENV,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    seen = b""
    async with asyncio.timeout(300):
        while b"Starting main benchmark run" not in seen:  # vllm/benchmarks/serve.py L919 @v0.32.0
            line = await proc.stdout.readline()
            assert line, "vllm bench serve ended before its main run: " + seen.decode(errors="replace")[-2000:]
            seen += line
        ours = await run_benchmark(RunBenchmarkInput(
            url=url, model=model, rate=RATE, num_prompts=PROMPTS, input_len=INPUT_LEN, output_len=OUTPUT_LEN,
            percentiles=[50, 90, 99], warmup_requests=0, save_result=str(tmp / "ours")))
        rest, _ = await proc.communicate()
    assert proc.returncode == 0, (seen + rest).decode(errors="replace")[-3000:]
    theirs: dict[str, Any] = json.loads((out_dir / "f.json").read_text())
    return theirs, ours


async def test_agrees_with_vllm_bench_serve(vllm_server: Any, tiny_models: Any, tmp_path: Path) -> None:
    theirs, out = await _vllm_bench_beside_ours(vllm_server.url, vllm_server.model, tiny_models.llama, tmp_path)
    assert out.result is not None
    ours = out.result.model_dump()
    missing = set(theirs) - set(ours)
    assert not missing, f"fields of vllm bench serve missing from ours: {sorted(missing)}"
    assert ours["completed"] == theirs["completed"] == PROMPTS
    assert ours["failed"] == theirs["failed"] == 0
    assert ours["total_output_tokens"] == theirs["total_output_tokens"] == PROMPTS * OUTPUT_LEN
    # Ours builds exact lengths through the server's tokenizer; vLLM's random dataset may be off by a few.
    assert ours["total_input_tokens"] == PROMPTS * INPUT_LEN
    assert abs(theirs["total_input_tokens"] - PROMPTS * INPUT_LEN) <= PROMPTS * 0.05 * INPUT_LEN
    # Both send a Poisson schedule at 10 req/s at the same time; their seeds differ, so durations differ by
    # schedule noise.
    assert ours["request_throughput"] == pytest.approx(theirs["request_throughput"], rel=0.25)
    for metric, floor_ms in (("ttft", 25.0), ("tpot", 4.0), ("itl", 4.0), ("e2el", 120.0)):
        a, b = ours[f"mean_{metric}_ms"], theirs[f"mean_{metric}_ms"]
        assert abs(a - b) <= max(floor_ms, 0.6 * b), f"mean {metric}: ours {a:.2f} ms vs vllm {b:.2f} ms"
    server = ours["server"]
    assert server["scrapes"] >= 3
    # The window also holds the other client's requests that finished inside it.
    assert PROMPTS <= server["requests_finished"] <= 2 * PROMPTS
    assert PROMPTS * OUTPUT_LEN <= server["generation_tokens"] <= 2 * PROMPTS * OUTPUT_LEN
    # The gauges were read in every scrape. Not asserted: that one caught a request running. At 10 req/s of
    # short requests the server is idle about a third of the time, and a busy host leaves only one or two
    # scrapes inside the run, so all of them can honestly read 0 (seen beside stress-ng).
    assert all(s["running"] is not None and s["kv_cache_usage"] is not None for s in server["samples"])
    assert server["server_mean_ttft_ms"] is not None and server["server_mean_queue_time_ms"] is not None
    assert server["cache_config"].get("block_size")
    # The server's own ITL over the window and ours agree closely: the client adds no delay of its own.
    assert abs(server["server_mean_itl_ms"] - ours["mean_itl_ms"]) <= max(1.5, 0.25 * ours["mean_itl_ms"])
    assert ours["provenance"]["server_version"] and ours["provenance"]["serve_flags_from_metrics"]
    # diagnose_metrics ran on the same window (first and last scrape of the run) and saw the requests finish.
    diagnosis = server["diagnosis"]
    assert diagnosis is not None, server["notes"]
    assert (diagnosis["workload"]["finished_requests"] or 0) >= PROMPTS * 0.8
    assert not diagnosis["verdict"].startswith(("idle", "abstaining")), diagnosis["verdict"]


async def test_capacity_search_on_real_server(vllm_server: Any, tmp_path: Path) -> None:
    out = await run_benchmark(RunBenchmarkInput(
        url=vllm_server.url, model=vllm_server.model, input_len=32, output_len=16, search_capacity=True,
        slo={"e2el": 3000}, slo_percentile=90, search_prompts=20, search_max=6.0, search_repeats=1,
        warmup_requests=0, save_result=str(tmp_path)))
    cap = out.capacity
    assert cap is not None and cap.curve
    assert cap.capacity is not None and 0 < cap.capacity <= 6.0
    assert all(p.completed == 20 for p in cap.curve)
    saved = json.loads(Path(out.result_path or "").read_text())
    assert saved["capacity"]["capacity"] == cap.capacity
