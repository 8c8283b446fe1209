"""TPOT against the running batch on the suite's vLLM CPU server, and whether --max-num-seqs changes a step's cost.

Starts servers (engine core pinned apart, as the what_if accuracy protocol runs them) with the given
--max-num-seqs values and runs closed loops of the given concurrencies on each, in turn, three rounds, so
that a drift of the host's speed shows as round-to-round spread rather than as a difference between servers
or batch sizes. Prints each run's client mean TPOT and the server's own mean ITL (engine-core timestamps).

This is the measurement behind what_if's notes on the max_num_seqs case (knowledge/entries/whatif.yaml,
whatif.calibration-log): B runs 6 sequences at --max-num-seqs 6 and was predicted slower than it ran.
Run it under the shared lock on an otherwise idle box:

    flock /tmp/vllm-tune-integration.lock .venv/bin/python bench/bench_step_batch.py \\
        [--max-num-seqs default,6,32] [--concurrency 2,6] [--input-len 128 --output-len 64]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.cpu_split import on_frontend_cores, split_cores
from support.tiny_models import ensure_tiny_models
from support.vllm_server import VllmServer, start_vllm

from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark

ROUNDS = 3


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-num-seqs", default="default,6,32", help="comma-separated; 'default': the flag unset")
    ap.add_argument("--concurrency", default="2,6", help="comma-separated closed-loop concurrencies")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    args = ap.parse_args()
    seqs = [s.strip() for s in args.max_num_seqs.split(",") if s.strip()]
    concurrencies = [int(c) for c in args.concurrency.split(",") if c.strip()]
    model = ensure_tiny_models(build=False).llama
    split = split_cores()
    servers: list[VllmServer] = []
    print("| round | concurrency | --max-num-seqs | client mean TPOT ms | server mean ITL ms |")
    print("|---:|---:|---:|---:|---:|")
    with on_frontend_cores(split):
        try:
            for s in seqs:
                flags = [] if s == "default" else ["--max-num-seqs", s]
                servers.append(await asyncio.to_thread(start_vllm, model, flags, split=split))
            seed = 7000
            for rnd in range(1, ROUNDS + 1):
                for c in concurrencies:
                    for s, server in zip(seqs, servers, strict=True):
                        seed += 1
                        out = await run_benchmark(RunBenchmarkInput(
                            url=server.url, seed=seed, warmup_requests=2, concurrency=c, input_len=args.input_len,
                            output_len=args.output_len, num_prompts=max(4 * c, 24)))
                        assert out.result is not None
                        r = out.result.model_dump()
                        itl = (r.get("server") or {}).get("server_mean_itl_ms")
                        print(f"| {rnd} | {c} | {s} | {r['mean_tpot_ms']:.2f} | "
                              f"{'-' if itl is None else f'{itl:.2f}'} |", flush=True)
        finally:
            for server in servers:
                server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
