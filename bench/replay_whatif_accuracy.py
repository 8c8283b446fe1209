"""The what_if accuracy protocol again, offline, on the runs an earlier bench_whatif_accuracy.py saved.

    .venv/bin/python bench/replay_whatif_accuracy.py RESULTS_DIR|RESULTS.jsonl.gz [--seed 100]

Each case's probe, run A twice and run B twice are found by their seeds (bench_whatif_accuracy.py uses 100 + case
index, the integration test 200 + case index) and fitted and predicted with the code as it is now, so a change to
the step model or the fit can be held against the same measurements before any server runs. Sends nothing.
Prints the calibration of each case, the predicted-vs-measured table and the misses, as the bench does.
tests/data/whatif/ holds six such runs (results trimmed of per-request lists and diagnoses): three with the engine
sharing both cores with the API server and the client, three with it on a core of its own (pinned-*).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.whatif.accuracy import (
    CASES,
    calibration_line,
    evaluate_saved,
    failures,
    load_saved,
    summary_table,
    table,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the folder bench_whatif_accuracy.py saved its runs in, or a "
                                               ".jsonl(.gz) of results")
    ap.add_argument("--seed", type=int, default=100, help="seed of the first case (100: the bench, 200: the test)")
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


if __name__ == "__main__":
    raise SystemExit(main())
