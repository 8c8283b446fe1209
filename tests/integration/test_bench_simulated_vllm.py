"""run_benchmark --search-capacity --simulate on the real vLLM CPU server: calibrated on three saved runs of it,
the capacity search is simulated, and the only requests that reach the server are those of the one verify run
(counted on the server's own request counter); the verify run's measured goodput is reported next to the
prediction for the same load."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from support.vllm_server import VllmServer

from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark
from vllm_tune.tools.bench.render import render_summary
from vllm_tune.tools.bench.server_watch import parse_scrape
from vllm_tune.tools.whatif.accuracy import QUICK_PROBE

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SUCCESS = "vllm:request_success_total"


async def _finished(url: str) -> float:
    """The server's count of finished requests, once it has stopped moving (counters land after the stream)."""
    last = -1.0
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
        for _ in range(20):
            value = parse_scrape((await client.get("/metrics")).text, 0.0).counters.get(SUCCESS, 0.0)
            if value == last:
                return value
            last = value
            await asyncio.sleep(0.5)
    return last


async def test_simulated_search_sends_only_the_verify_run(vllm_server: VllmServer, tmp_path: Path) -> None:
    saved = []
    for i, p in enumerate(QUICK_PROBE):  # the calibration: the accuracy protocol's probe loads, saved
        out = await run_benchmark(RunBenchmarkInput(
            url=vllm_server.url, concurrency=p.concurrency, num_prompts=p.num_prompts, input_len=p.input_len,
            output_len=p.output_len, range_ratio=p.range_ratio, seed=i, warmup_requests=1, save_result=str(tmp_path),
            label=f"cal-{i}"))
        assert out.result_path is not None and out.result is not None and out.result.failed == 0
        saved.append(str(Path(out.result_path).parent))

    before = await _finished(vllm_server.url)
    req = RunBenchmarkInput(url=vllm_server.url, search_capacity=True, slo={"ttft": 1500}, slo_percentile=90,
                            input_len=64, output_len=64, search_prompts=40, warmup_requests=1,
                            save_result=str(tmp_path), simulate=",".join([*saved, "verify"]))
    out = await run_benchmark(req)
    after = await _finished(vllm_server.url)

    cap, sim = out.capacity, out.simulation
    assert cap is not None and sim is not None and cap.simulated
    assert cap.capacity is not None, cap.confidence
    # A measured search of this shape sends a saturation probe and several 40-request steps (hundreds of
    # requests); the simulated one sent none of them: what arrived is the verify run and its warm-up.
    steps = [p for p in cap.curve if p.phase != "probe"]
    assert len(steps) >= 3
    v = sim.verify
    assert v is not None and v.value == cap.capacity
    sent = v.measured.completed + v.measured.failed + req.warmup_requests
    assert sent == req.search_prompts + req.warmup_requests
    assert after - before == sent, (before, after)
    # Predicted and measured goodput of the same load (same schedule and seed), side by side.
    assert v.measured.request_goodput is not None and v.predicted.request_goodput is not None
    assert v.measured.completed == req.search_prompts
    assert "request_goodput" in v.relative_errors or v.measured.request_goodput == 0
    assert v.verdict.startswith("the measured run ")
    text = render_summary(out)
    assert "goodput (req/s)" in text and "Verify" in text and sim.uncertainty in text
    print(text)
