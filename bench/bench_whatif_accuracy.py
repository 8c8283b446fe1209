"""what_if against real vLLM: calibrate on server A, predict six (config, load) pairs, run them, compare.

Uses the suite's vLLM CPU server (tests/support; components from `python -m tests.support.provision`).
Run it under the shared lock, it starts up to four servers one after another:

    flock /tmp/vllm-tune-integration.lock .venv/bin/python bench/bench_whatif_accuracy.py

Prints the calibration (coefficients and residuals on the probe runs) and the predicted-vs-measured
table; a row outside its tolerance says NO, a change predicted the wrong way says WRONG. Each server's engine
core process runs on cores of its own, its API server and this client on the others, as in the integration test.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.cpu_split import on_frontend_cores, split_cores
from support.tiny_models import ensure_tiny_models
from support.vllm_server import VllmServer, start_vllm

from vllm_tune.tools.whatif.accuracy import (
    BENCH_SEED,
    CASES,
    calibration_line,
    failures,
    run_case,
    summary_table,
    table,
)


async def main() -> int:
    models = ensure_tiny_models(build=False)
    save = tempfile.mkdtemp(prefix="whatif-accuracy-")
    servers: dict[tuple[tuple[str, str], ...], VllmServer] = {}
    split = split_cores()  # the engine core process on cores of its own (tests/support/cpu_split.py)

    async def start(flags: dict[str, str]) -> str:
        key = tuple(sorted(flags.items()))
        if key not in servers:
            for other in [k for k in servers if k]:  # keep A and at most one B alive (memory)
                servers.pop(other).stop()
            args = [x for kv in flags.items() for x in kv]
            servers[key] = await asyncio.to_thread(start_vllm, models.llama, args, split=split)
        return servers[key].url

    with on_frontend_cores(split):  # the client beside the API server, off the engine's cores
        try:
            t0 = time.monotonic()
            a_url = await start({})
            outcomes = []
            for i, case in enumerate(CASES):
                cal, outcome = await run_case(a_url, {}, start, case, seed=BENCH_SEED + i, save_result=save)
                outcomes.append(outcome)
                print(f"case {i + 1}/{len(CASES)} {case.name} ({time.monotonic() - t0:.0f} s): "
                      f"{calibration_line(cal)}",
                      flush=True)
            print()
            print(table(outcomes))
            print()
            print("B's two runs → predicted, error against their mean:")
            print(summary_table(outcomes))
            bad = failures(outcomes)
            judged = failures(outcomes, judgeable_only=True)
            print()
            print(f"{len(bad)} outside the targets ({len(judged)} where the measurement repeated within the "
                  "tolerance)" + (":" if bad else ""))
            for line in bad:
                print("  " + line)
            print(f"\nruns saved in {save}; replay them offline: bench/replay_whatif_accuracy.py {save}")
            return 0
        finally:
            for server in servers.values():
                server.stop()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
