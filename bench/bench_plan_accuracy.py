"""The planner's estimates against the measured-results table (knowledge/measured), beside AIConfigurator's.

For every row with a deployment-wide output throughput it prints |estimate/measured - 1| for our fitted estimator
(knowledge/calibration/plan-estimator.yaml) and, on the rows AIConfigurator covers (its GPU databases and the
model configs it ships; no hub access), for `aiconfigurator` 0.12 on the same points, plus how many measured
pairwise rankings (same model, GPU, dtype, engine and workload; per-GPU gap >= 15%) each orders right.

AIConfigurator is run with the row's engine as its backend and the row's layout; its batch is the row's
concurrency per replica, or for offline rows the largest batch its own memory model accepts (halving from the
engine's cap), and for request-rate rows its throughput is capped at rate x osl. Not run in CI.

  .venv/bin/python bench/bench_plan_accuracy.py [--no-aic] [--aic-cache FILE] [--json FILE] [--verbose]

AIConfigurator takes about a second per call (offline rows need several); --aic-cache keeps its answers per
row in a JSON file so that a rerun after refitting our estimator only recomputes ours.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from vllm_tune.tools.parallel.fit import (
    ENGINE_MAX_SEQS,
    Point,
    estimate_point,
    prepare,
    quantile,
    ranking_pairs,
    rankings_right,
)
from vllm_tune.tools.parallel.measured import load_measured
from vllm_tune.tools.parallel.params import load_params
from vllm_tune.tools.parallel.peer import aic_point, aic_version, coverage

AIC_BACKEND = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}


def aic_throughput(p: Point) -> tuple[float | None, str]:
    """AIConfigurator's output tok/s for a measured point, and what was run."""
    where = coverage(p.facts, p.gpu)
    if isinstance(where, str):
        return None, where
    load = p.row.load
    backend = AIC_BACKEND[p.row.engine]
    replicas = p.layout.replicas * (p.layout.data_parallel_size if p.facts.moe is None else 1)
    if load.kind in ("concurrency", "static_batch") and load.value:
        batches = [max(1, round(load.value / max(replicas, 1)))]
    else:
        start = min(load.num_prompts or 10**6, ENGINE_MAX_SEQS.get(p.row.engine, 1024))
        if p.facts.moe is not None and p.layout.data_parallel_size > 1:
            start = max(1, start // p.layout.data_parallel_size)
        batches = []
        b = start
        while b >= 1:
            batches.append(b)
            b //= 2
    note = ""
    for b in batches:
        pe = aic_point(p.facts, p.gpu, p.layout, isl=p.row.isl, osl=p.row.osl, batch=b, backend=backend)
        if pe.output_tokens_per_s is not None:
            value = pe.output_tokens_per_s
            if load.kind == "request_rate" and load.value:
                value = min(value, load.value * p.row.osl)
            return value, pe.note or ""
        note = pe.note or ""
        if "OOM" not in note:
            break
    return None, note


def _aic_all(points: Sequence[Point], ours: Sequence[float | None], args: argparse.Namespace,
             cache: dict[str, list[object]]) -> tuple[list[float | None], list[str]]:
    """AIConfigurator's figure per point (from the cache when it has one), and what was run."""
    use_aic = not args.no_aic and aic_version() is not None
    theirs: list[float | None] = []
    notes: list[str] = []
    for i, p in enumerate(points):
        if use_aic and p.row.id in cache:
            value, note = cache[p.row.id]  # type: ignore[assignment]
        elif use_aic:
            value, note = aic_throughput(p)
            cache[p.row.id] = [value, note]
            if args.aic_cache:
                Path(args.aic_cache).write_text(json.dumps(cache), encoding="utf-8")
        else:
            value, note = None, "not run"
        theirs.append(value)
        notes.append(note)
        if args.verbose:
            o = ours[i]
            print(f"{p.row.id:60s} measured {p.measured:9.0f}  ours {o or 0:9.0f}  aic "
                  f"{value if value is not None else float('nan'):9.0f}  {note[:60]}", file=sys.stderr)
    return theirs, notes


def _stats(errors: Sequence[float]) -> str:
    if not errors:
        return "n/a"
    return f"median {quantile(errors, 0.5):6.1%}  p90 {quantile(errors, 0.9):6.1%}  (n={len(errors)})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-aic", action="store_true", help="skip AIConfigurator")
    ap.add_argument("--json", help="write per-row figures to this file")
    ap.add_argument("--verbose", action="store_true", help="print every row")
    ap.add_argument("--aic-cache", help="JSON file of AIConfigurator answers by row id (read, then extended)")
    args = ap.parse_args(argv)
    cache: dict[str, list[object]] = {}
    if args.aic_cache and Path(args.aic_cache).exists():
        cache = json.loads(Path(args.aic_cache).read_text(encoding="utf-8"))

    params = load_params()
    points, skipped = prepare(load_measured())
    points = [p for p in points if p.metric == "output_tok_s"]
    ours = [estimate_point(p, params) for p in points]
    theirs, notes = _aic_all(points, ours, args, cache)

    def err(e: float | None, p: Point) -> float | None:
        return None if e is None else abs(e / p.measured - 1)

    ours_all = [x for x in (err(e, p) for e, p in zip(ours, points, strict=True)) if x is not None]
    both = [i for i, t in enumerate(theirs) if t is not None and ours[i] is not None]
    ours_both = [err(ours[i], points[i]) or 0.0 for i in both]
    aic_both = [err(theirs[i], points[i]) or 0.0 for i in both]
    pairs = ranking_pairs(points)
    r_ours, n_ours, wrong_ours = rankings_right(ours, points, pairs)
    covered = set(both)
    pairs_both = [(a, b) for a, b in pairs if a in covered and b in covered]
    r_ours_b, n_b, _ = rankings_right(ours, points, pairs_both)
    r_aic_b, _, _ = rankings_right(theirs, points, pairs_both)
    print(f"measured table: {len(points)} throughput points ({len(skipped)} rows not usable); fit: "
          f"{params.source}")
    print(f"AIConfigurator: {aic_version() or 'not installed'}; covers {len(both)} of the points")
    print()
    print("| estimator | points | median abs error | p90 abs error | rankings right (gap >= 15%) |")
    print("|---|---|---|---|---|")
    print(f"| vllm-tune (all points) | {len(ours_all)} | {quantile(ours_all, 0.5):.1%} | {quantile(ours_all, 0.9):.1%} "
          f"| {r_ours}/{n_ours} |")
    if both:
        print(f"| vllm-tune (AIC's points) | {len(both)} | {quantile(ours_both, 0.5):.1%} | "
              f"{quantile(ours_both, 0.9):.1%} | {r_ours_b}/{n_b} |")
        print(f"| AIConfigurator {aic_version()} (same points) | {len(both)} | {quantile(aic_both, 0.5):.1%} | "
              f"{quantile(aic_both, 0.9):.1%} | {r_aic_b}/{n_b} |")
    print()
    by_engine: dict[str, list[float]] = {}
    for e, p in zip(ours, points, strict=True):
        x = err(e, p)
        if x is not None:
            by_engine.setdefault(p.row.engine, []).append(x)
    for engine, errs in sorted(by_engine.items()):
        print(f"ours on {engine:13s}: {_stats(errs)}")
    for engine in sorted({points[i].row.engine for i in both}):
        idx = [i for i in both if points[i].row.engine == engine]
        print(f"on AIC's {engine:13s} points: ours {_stats([err(ours[i], points[i]) or 0.0 for i in idx])}; "
              f"AIC {_stats([err(theirs[i], points[i]) or 0.0 for i in idx])}")
    _, _, wrong_aic = rankings_right(theirs, points, pairs_both)
    if wrong_aic:
        print("rankings AIConfigurator gets wrong: " + "; ".join(f"{a} > {b}" for a, b in wrong_aic))
    if wrong_ours:
        print("rankings we get wrong: " + "; ".join(f"{a} > {b}" for a, b in wrong_ours))
    if args.json:
        rows = [{"id": p.row.id, "measured": p.measured, "ours": o, "aic": t, "aic_note": n}
                for p, o, t, n in zip(points, ours, theirs, notes, strict=True)]
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"rows": rows, "pairs": [[points[a].row.id, points[b].row.id] for a, b in pairs]}, fh,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
