"""Where a request's TTFT goes on the suite's vLLM CPU server: outside the engine, queued, or in prefill.

Starts two servers (vLLM's default --max-num-batched-tokens and 256) and runs each load on both, in turn,
twice. From the server's own histograms over each run (run_benchmark's server window) it prints, per run:
the client's mean and median TTFT, the server's mean TTFT, queue time (waiting for the scheduler) and prefill
time (first scheduled to first token), and what is left of the server's TTFT outside those two: the API
server taking the request in, the wait for the engine's running step to end, and the first token's way out.

This is the measurement behind what_if's hand-off term (knowledge/entries/whatif.yaml, whatif.calibration-log):
the simulator charges a hand-off that grows with the requests in flight, and this shows when that holds.
Run it under the shared lock on an otherwise idle box:

    flock /tmp/vllm-tune-integration.lock .venv/bin/python bench/bench_ttft_split.py
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.tiny_models import ensure_tiny_models
from support.vllm_server import start_vllm

from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark

LOADS: list[tuple[str, dict[str, Any]]] = [
    ("closed loop c=8, 700 in / 48 out", {"concurrency": 8, "input_len": 700, "output_len": 48, "num_prompts": 64}),
    ("Poisson 30 req/s, 700 in / 48 out", {"rate": 30.0, "input_len": 700, "output_len": 48, "num_prompts": 90}),
    ("closed loop c=8, 32 in / 48 out", {"concurrency": 8, "input_len": 32, "output_len": 48, "num_prompts": 48}),
    ("one at a time, 700 in / 8 out", {"concurrency": 1, "input_len": 700, "output_len": 8, "num_prompts": 16}),
]
BUDGETS = [None, "256"]  # None: vLLM's default for the CPU backend


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


async def main() -> int:
    model = ensure_tiny_models(build=False).llama
    servers = [start_vllm(model, [] if b is None else ["--max-num-batched-tokens", b]) for b in BUDGETS]
    print("| load | budget | client TTFT mean / p50 ms | server TTFT ms | queue ms | prefill ms | outside both ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    seed = 500
    try:
        for _rep in range(2):
            for name, load in LOADS:
                for budget, server in zip(BUDGETS, servers, strict=True):
                    seed += 1
                    out = await run_benchmark(RunBenchmarkInput(url=server.url, seed=seed, warmup_requests=2, **load))
                    assert out.result is not None
                    r = out.result.model_dump()
                    w = r.get("server") or {}
                    ttft, queue, prefill = (w.get("server_mean_ttft_ms"), w.get("server_mean_queue_time_ms"),
                                            w.get("server_mean_prefill_time_ms"))
                    rest = None
                    if ttft is not None and queue is not None and prefill is not None:
                        rest = ttft - queue - prefill

                    print(f"| {name} | {budget or 'default'} | {r['mean_ttft_ms']:.1f} / {r['median_ttft_ms']:.1f} | "
                          f"{_ms(ttft)} | {_ms(queue)} | {_ms(prefill)} | {_ms(rest)} |", flush=True)
    finally:
        for server in servers:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
