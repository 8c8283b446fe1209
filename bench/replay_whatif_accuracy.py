"""The what_if accuracy protocol again, offline, on the runs an earlier bench_whatif_accuracy.py saved.

    .venv/bin/python bench/replay_whatif_accuracy.py RESULTS_DIR|RESULTS.jsonl.gz [--seed N] [--waves]
        [--ttft-split CASE] [--ttft-shape CASE]

Each case's probe, run A twice and run B twice are found by their seeds (bench_whatif_accuracy.py uses 100 + case
index, the integration test 200 + case index) and fitted and predicted with the code as it is now, so a change to
the step model or the fit can be held against the same measurements before any server runs. Sends nothing.
Prints the calibration of each case, the predicted-vs-measured table and the misses, as the bench does. With --waves
it also prints the concurrency-48 case's simulated closed loop wave by wave, in the columns that
`bench/bench_request_path.py --intake` measures on the real server. With --ttft-split CASE it prints, for that case's
runs A and B, the mean TTFT measured outside and inside the engine (the server's queue + prefill histograms) beside
the simulated hand-off and engine parts. With --ttft-shape CASE it prints the spread of that case's TTFTs request by
request, measured and simulated, after a closed loop's first wave (runs saved with their per-request TTFTs only).
tests/data/whatif/ holds thirty-two such runs (scripts/pack_whatif_runs.py: results trimmed of per-request lists and
diagnoses; the pinned and proof ones keep each request's TTFT): three of the bench with the engine sharing both cores
with the API server and the client, twenty-two of the bench with it on a core of its own (pinned-*; the last five
with the probe's fifth point), and seven of the integration test's, five in full scripts/check runs and two of the
test alone (proof-*, seeds 200+).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from vllm_tune.tools.bench.api import RunBenchmarkInput
from vllm_tune.tools.bench.metrics import percentile
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.whatif.accuracy import (
    B_SEED_OFFSET,
    CASES,
    RUNS_OF_A_CASE,
    Case,
    calibration_line,
    engine_updates,
    evaluate_saved,
    failures,
    load_saved,
    results_by_seed,
    saved_seed,
    summary_table,
    table,
)
from vllm_tune.tools.whatif.calibrate import Calibration, observed_from_result
from vllm_tune.tools.whatif.results import load_from_request
from vllm_tune.tools.whatif.simulate import StepModel, Trace, run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the folder bench_whatif_accuracy.py saved its runs in, or a "
                                               ".jsonl(.gz) of results")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the first case (100: the bench, 200: the test; default: 200 for a proof-* file or "
                         "folder, else 100)")
    ap.add_argument("--waves", action="store_true", help="the concurrency-48 case's simulated waves")
    ap.add_argument("--ttft-split", type=int, metavar="CASE", default=None,
                    help="for case CASE (1-6), each run's mean TTFT split outside and inside the engine, measured "
                         "and simulated")
    ap.add_argument("--ttft-shape", type=int, metavar="CASE", default=None,
                    help="for case CASE (1-6), each run's TTFT percentiles after the first wave, measured and "
                         "simulated")
    args = ap.parse_args()
    try:
        results = load_saved(args.results)
    except (OSError, ValueError) as exc:  # missing file, not gzip, not JSON lines
        print(f"cannot read saved results from {args.results}: {exc}", file=sys.stderr)
        return 2
    if not results:
        print(f"no result.json under {args.results}", file=sys.stderr)
        return 2
    if args.seed is None:
        args.seed = saved_seed(args.results)
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
            print("\n".join(simulated_waves(cal, case, args.seed + B_SEED_OFFSET)) + "\n")
        if args.ttft_split == i + 1:
            print("\n".join(ttft_split(results, cal, case, args.seed + i)) + "\n")
        if args.ttft_shape == i + 1:
            print("\n".join(ttft_shape(results, cal, case, args.seed + i)) + "\n")
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


def _schedulable(tr: Trace, model: StepModel, r: int) -> float:
    """When simulated request r could first be scheduled: its send plus its hand-off (and intake queue)."""
    return (tr.send[r] + model.hand_off_s(tr.others_at_send[r], tr.idle_at_send[r], tr.alongside_at_send[r])
            + tr.hand_off_extra[r])


def ttft_split(results: list[dict[str, Any]], cal: Calibration, case: Case, seed: int) -> list[str]:
    """Runs A, B, A again and B again of a case: the client's mean TTFT, the server's mean queue + prefill time
    (from the engine core taking the request in, between steps, to its first token) and the rest ("outside": the
    client and the API server, the wait for the running step to end, the first token's way out); beside them the
    simulated mean TTFT, hand-off (send to schedulable) and engine part (schedulable to first token, which holds
    the wait for the running step)."""
    by_seed = results_by_seed(results)
    out = ["| run | TTFT ms | server queue + prefill ms | outside ms | simulated TTFT ms | simulated hand-off ms | "
           "simulated engine ms |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, offset, changed in RUNS_OF_A_CASE:
        res = by_seed[seed + offset]
        flags = case.flags if changed else {}
        server = res.get("server") or {}
        inside = float(server.get("server_mean_queue_time_ms") or 0.0) + float(
            server.get("server_mean_prefill_time_ms") or 0.0)
        obs = observed_from_result(res)
        engine = cal.engine.model_copy(update=engine_updates(flags))
        tr = run(engine, cal.step_model, obs.load, keep_windows=True)
        n = len(tr.send)
        ready = [_schedulable(tr, cal.step_model, r) for r in range(n)]
        sim_ttft = statistics.mean(tr.first[r] - tr.send[r] for r in range(n)) * 1e3
        hand_off = statistics.mean(ready[r] - tr.send[r] for r in range(n)) * 1e3
        ttft = float(res["mean_ttft_ms"])
        out.append(f"| {name} | {ttft:.1f} | {inside:.1f} | {ttft - inside:.1f} | {sim_ttft:.1f} | {hand_off:.1f} | "
                   f"{sim_ttft - hand_off:.1f} |")
    return out


def ttft_shape(results: list[dict[str, Any]], cal: Calibration, case: Case, seed: int) -> list[str]:
    """Runs A, B, A again and B again of a case: the 10th, 50th and 90th percentile and the mean of the TTFTs of the
    requests after a closed loop's first wave (all of an open loop's), measured (the result's per-request TTFTs) and
    simulated request by request on the same prompts. The first wave is left out because it prefills together in
    both; what follows shows whether the simulated loop spreads its requests as the server did."""
    by_seed = results_by_seed(results)
    out = ["| run | requests | measured p10 / p50 / p90 ms | simulated p10 / p50 / p90 ms | measured / simulated "
           "mean ms |", "|---|---:|---:|---:|---:|"]
    for name, offset, changed in RUNS_OF_A_CASE:
        res = by_seed.get(seed + offset)
        if res is None or not res.get("ttfts"):
            out.append(f"| {name} | - | no per-request TTFTs saved | | |")
            continue
        obs = observed_from_result(res)
        engine = cal.engine.model_copy(update=engine_updates(case.flags if changed else {}))
        tr = run(engine, cal.step_model, obs.load)  # send and first-token times only: no step windows
        skip = (obs.load.concurrency or 0) if obs.load.offsets is None else 0
        measured = sorted(float(t) * 1e3 for t in res["ttfts"][skip:])
        simulated = sorted((f - a) * 1e3 for f, a in list(zip(tr.first, tr.send, strict=True))[skip:])
        if not measured or not simulated:
            out.append(f"| {name} | 0 | | | |")
            continue

        def spread(v: list[float]) -> str:
            return " / ".join(f"{percentile(v, q):.1f}" for q in (10, 50, 90))

        out.append(f"| {name} | {len(measured)} | {spread(measured)} | {spread(simulated)} | "
                   f"{statistics.fmean(measured):.1f} / {statistics.fmean(simulated):.1f} |")
    return out


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
        engine = sorted((tr.first[r] - _schedulable(tr, model, r)) * 1e3 for r in rows)
        ttft = sorted((tr.first[r] - tr.send[r]) * 1e3 for r in rows)
        sent, done = [tr.send[r] * 1e3 for r in rows], [tr.last[r] * 1e3 for r in rows]
        out.append(f"| {w // size + 1} | {min(sent):.0f}-{max(sent):.0f} | {min(done):.0f}-{max(done):.0f} | "
                   f"{statistics.median(engine):.1f} / {engine[-1]:.1f} | {statistics.median(ttft):.1f} / "
                   f"{ttft[int(0.9 * (len(ttft) - 1))]:.1f} |")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
