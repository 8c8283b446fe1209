"""The what_if accuracy protocol again, offline, on the runs an earlier bench_whatif_accuracy.py saved.

    .venv/bin/python bench/replay_whatif_accuracy.py RESULTS_DIR|RESULTS.jsonl.gz [--seed 100]

Each case's probe, run A twice and run B twice are found by their seeds (bench_whatif_accuracy.py uses 100 + case
index, the integration test 200 + case index) and fitted and predicted with the code as it is now, so a change to
the step model or the fit can be held against the same measurements before any server runs. Sends nothing.
Prints the calibration of each case, the predicted-vs-measured table and the misses, as the bench does. With --waves
it also prints the concurrency-48 case's simulated closed loop wave by wave, in the columns that
`bench/bench_request_path.py --intake` measures on the real server.
tests/data/whatif/ holds eight such runs (results trimmed of per-request lists and diagnoses): three with the engine
sharing both cores with the API server and the client, five with it on a core of its own (pinned-*).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from vllm_tune.tools.bench.api import RunBenchmarkInput
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.whatif.accuracy import (
    CASES,
    Case,
    calibration_line,
    evaluate_saved,
    failures,
    load_saved,
    summary_table,
    table,
)
from vllm_tune.tools.whatif.calibrate import Calibration
from vllm_tune.tools.whatif.results import load_from_request
from vllm_tune.tools.whatif.simulate import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the folder bench_whatif_accuracy.py saved its runs in, or a "
                                               ".jsonl(.gz) of results")
    ap.add_argument("--seed", type=int, default=100, help="seed of the first case (100: the bench, 200: the test)")
    ap.add_argument("--waves", action="store_true", help="the concurrency-48 case's simulated waves")
    args = ap.parse_args()
    try:
        results = load_saved(args.results)
    except (OSError, ValueError) as exc:  # missing file, not gzip, not JSON lines
        print(f"cannot read saved results from {args.results}: {exc}", file=sys.stderr)
        return 2
    if not results:
        print(f"no result.json under {args.results}", file=sys.stderr)
        return 2
    outcomes = []
    for i, case in enumerate(CASES):
        try:
            cal, outcome = evaluate_saved(results, args.seed + i, case)
        except BadInputError as exc:  # e.g. runs of another seed, or an incomplete run
            print(f"{exc} (is --seed {args.seed} the seed of that run's first case?)", file=sys.stderr)
            return 2
        outcomes.append(outcome)
        print(f"{case.name}: {calibration_line(cal)}", flush=True)
        if args.waves and i == 0:
            print("\n".join(simulated_waves(cal, case, args.seed + 1000)) + "\n")
    print()
    print(table(outcomes))
    print()
    print(summary_table(outcomes))
    judged = failures(outcomes, judgeable_only=True)
    print(f"\n{len(judged)} outside the targets where the measurement repeated within the tolerance"
          + (":" if judged else ""))
    for line in judged:
        print("  " + line)
    return 0


def simulated_waves(cal: Calibration, case: Case, seed: int) -> list[str]:
    """B's closed loop as simulated, wave by wave (requests in send order, a concurrency at a time): ms from the
    first send over which the wave was sent and finished, from reaching the engine to the first token, and TTFT."""
    load = load_from_request(RunBenchmarkInput(url="http://127.0.0.1:1", seed=seed, **case.load))
    model = cal.step_model
    tr = run(cal.engine, model, load, keep_windows=True)
    order = sorted(range(len(tr.send)), key=lambda r: tr.send[r])
    size = int(load.concurrency or len(order))
    out = ["| wave | sent | finished | reached engine to first token p50 / max | TTFT p50 / p90 |",
           "|---|---:|---:|---:|---:|"]
    for w in range(0, len(order), size):
        rows = order[w:w + size]
        engine = sorted((tr.first[r] - tr.send[r] - model.hand_off_s(tr.others_at_send[r]) - tr.hand_off_extra[r])
                        * 1e3 for r in rows)
        ttft = sorted((tr.first[r] - tr.send[r]) * 1e3 for r in rows)
        sent, done = [tr.send[r] * 1e3 for r in rows], [tr.last[r] * 1e3 for r in rows]
        out.append(f"| {w // size + 1} | {min(sent):.0f}-{max(sent):.0f} | {min(done):.0f}-{max(done):.0f} | "
                   f"{statistics.median(engine):.1f} / {engine[-1]:.1f} | {statistics.median(ttft):.1f} / "
                   f"{ttft[int(0.9 * (len(ttft) - 1))]:.1f} |")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
