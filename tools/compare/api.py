"""compare_runs: did a change make serving better, worse, or no different beyond noise, and were the runs comparable.

The input and output models live in `models` and are re-exported here. Verdicts per metric use a
seeded bootstrap interval when both runs kept per-request values (TTFT, E2EL, and TPOT where output
lengths were saved), else a relative-noise threshold, which the output marks as the weaker basis.
"""

from __future__ import annotations

import math
import re
from typing import Any

from vllm_tune.tools.bench.metrics import percentile_label
from vllm_tune.tools.compare.capacity import capacity_rows
from vllm_tune.tools.compare.checks import STABLE_P99_REQUESTS, compare_checks
from vllm_tune.tools.compare.load import LoadedRun, load_runs
from vllm_tune.tools.compare.models import (
    DEFAULT_METRICS,
    LATENCY_METRICS,
    CandidateComparison,
    Check,
    CompareInput,
    CompareOutput,
    MetricComparison,
    Overall,
    RunInfo,
    ServerDiff,
    ServerExplanation,
)
from vllm_tune.tools.compare.server_diff import server_differences
from vllm_tune.tools.compare.stats import Interval, bootstrap_differences, judge, relative_change

__all__ = ["CompareInput", "CompareOutput", "compare_runs"]

BOOTSTRAP_ID = "comparison.bootstrap-difference-ci"
THRESHOLD_ID = "comparison.single-run-noise-threshold"
AB_ID = "benchmarking.ab-comparison"
_PCT_KEY = re.compile(r"^p([0-9.]+)_(ttft|tpot|itl|e2el)_ms$")
_RATE_UNITS = {"request_throughput": "req/s", "request_goodput": "req/s", "output_throughput": "tok/s",
               "total_token_throughput": "tok/s"}

METHOD = (
    "Each candidate is compared with the baseline metric by metric. Where both runs kept per-request values "
    "(TTFT and E2EL, TPOT when output lengths were saved), the requests of each run are resampled with "
    "replacement (seeded) and the interval of the difference of the statistic decides: better or worse only "
    "when the interval excludes zero and the change is at least min_effect_pct. This covers sampling noise "
    "within a run, not drift between runs; repeat A/B pairs back to back for a stronger answer. Other metrics "
    "(ITL, throughputs, goodput, or runs without per-request values) use a relative-noise threshold "
    "(noise_threshold_pct), a weaker basis. Any blocking comparability check makes every verdict "
    "not-comparable; the numbers are still shown."
)


def _num(value: Any) -> float | None:
    """A finite number, or None: NaN and Infinity (which Python's json reads) cannot be compared."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _series(run: LoadedRun, metric: str) -> list[float] | None:
    values = {"ttft": run.ttfts, "e2el": run.e2els, "tpot": run.tpots}.get(metric)
    return [v * 1000.0 for v in values] if values else None


def _statistics(base: LoadedRun, cand: LoadedRun, metric: str, percentiles: list[float] | None) -> list[str]:
    if percentiles is not None:
        labels = [percentile_label(p) for p in percentiles]
    else:
        def present(run: LoadedRun) -> set[float]:
            return {float(m.group(1)) for k in run.data if (m := _PCT_KEY.match(k)) and m.group(2) == metric}

        labels = [percentile_label(p) for p in sorted(present(base) & present(cand))]
    stats = ["mean"]
    if "p50" not in labels:
        stats.append("median")
    return stats + labels


def _latency_rows(base: LoadedRun, cand: LoadedRun, metric: str, req: CompareInput, seed: str,
                  explicit: bool) -> tuple[list[MetricComparison], int | None]:
    stats = _statistics(base, cand, metric, req.percentiles)
    keys = {s: ("median" if s == "p50" and f"p50_{metric}_ms" not in base.data else s) for s in stats}
    if not explicit and not any(f"{keys[s]}_{metric}_ms" in base.data or f"{keys[s]}_{metric}_ms" in cand.data
                                for s in stats):
        return [], None
    a_series, b_series = _series(base, metric), _series(cand, metric)
    intervals: dict[str, Interval] = {}
    rounds: int | None = None
    if a_series and b_series:
        intervals, rounds = bootstrap_differences(a_series, b_series, stats, confidence=req.confidence, seed=seed,
                                                  resamples=req.resamples)
    few = min(base.completed, cand.completed) < STABLE_P99_REQUESTS
    rows: list[MetricComparison] = []
    for s in stats:
        key = f"{keys[s]}_{metric}_ms"
        a, b = _num(base.data.get(key)), _num(cand.data.get(key))
        note: str | None = None
        if s.startswith("p") and float(s[1:]) >= 99 and few:
            note = f"fewer than {STABLE_P99_REQUESTS} requests in a run: this tail percentile is unstable"
        if a is None or b is None:
            missing = "baseline" if a is None else "candidate"
            rows.append(MetricComparison(metric=metric, statistic=s, key=key, unit="ms", better_when="lower",
                                         baseline=a, candidate=b, delta=None, delta_pct=None, basis="none",
                                         verdict="not-comparable",
                                         note=f"{key} is missing or not a finite number in the {missing}"))
            continue
        interval = intervals.get(s)
        verdict, basis = judge(a, b, "lower", interval=interval, noise_pct=req.noise_threshold_pct,
                               min_effect_pct=req.min_effect_pct)
        if note and basis == "threshold" and verdict != "within-noise":
            # An unstable tail with no per-request values to bound it cannot carry a verdict on its own.
            verdict = "within-noise"
            note += "; with no per-request values it cannot support a verdict"
        rows.append(MetricComparison(metric=metric, statistic=s, key=key, unit="ms", better_when="lower",
                                     baseline=a, candidate=b, delta=b - a, delta_pct=relative_change(a, b),
                                     ci_low=interval.low if interval else None,
                                     ci_high=interval.high if interval else None, basis=basis, verdict=verdict,
                                     note=note))
    return rows, rounds


def _open_loop_rate(run: LoadedRun) -> float | None:
    rate = _num(run.data.get("request_rate"))
    return rate if rate is not None and not math.isinf(rate) else None


def _rate_row(base: LoadedRun, cand: LoadedRun, metric: str, req: CompareInput,
              explicit: bool) -> MetricComparison | None:
    a, b = _num(base.data.get(metric)), _num(cand.data.get(metric))
    unit = _RATE_UNITS[metric]
    if a is None or b is None:
        if not explicit and a is None and b is None:
            return None
        missing = "both runs" if a is None and b is None else ("the baseline" if a is None else "the candidate")
        why = " (no SLO was given)" if metric == "request_goodput" else ""
        return MetricComparison(metric=metric, statistic="value", key=metric, unit=unit, better_when="higher",
                                baseline=a, candidate=b, delta=None, delta_pct=None, basis="none",
                                verdict="not-comparable", note=f"missing or not a finite number in {missing}{why}")
    note: str | None = None
    if metric == "request_goodput" and base.data.get("slo_ms") != cand.data.get("slo_ms"):
        return MetricComparison(metric=metric, statistic="value", key=metric, unit=unit, better_when="higher",
                                baseline=a, candidate=b, delta=b - a, delta_pct=relative_change(a, b), basis="none",
                                verdict="not-comparable",
                                note=f"different SLOs: {base.data.get('slo_ms')} vs {cand.data.get('slo_ms')}")
    rate_a, rate_b = _open_loop_rate(base), _open_loop_rate(cand)
    if metric == "request_throughput" and rate_a and rate_b and math.isclose(rate_a, rate_b, rel_tol=0.01) \
            and a >= 0.9 * rate_a and b >= 0.9 * rate_b:
        note = (f"both runs kept up with the offered {rate_a:g} req/s: throughput is set by the load, not the "
                "server; compare latencies or run a capacity search")
    verdict, basis = judge(a, b, "higher", interval=None, noise_pct=req.noise_threshold_pct,
                           min_effect_pct=req.min_effect_pct)
    return MetricComparison(metric=metric, statistic="value", key=metric, unit=unit, better_when="higher",
                            baseline=a, candidate=b, delta=b - a, delta_pct=relative_change(a, b), basis=basis,
                            verdict=verdict, note=note)


def _fmt_row(m: MetricComparison) -> str:
    name = m.metric if m.statistic == "value" else f"{m.metric} {m.statistic}"
    pct = f"{m.delta_pct:+.1f}%" if m.delta_pct is not None else f"{m.delta:+.3g} {m.unit}"
    return f"{name} {pct}" + (" (interval excludes 0)" if m.basis == "bootstrap" else "")


def _overall(checks: list[Check], rows: list[MetricComparison]) -> Overall:
    if any(c.severity == "blocking" for c in checks):
        return "not-comparable"
    worse = any(m.verdict == "worse" for m in rows)
    better = any(m.verdict == "better" for m in rows)
    if worse and better:
        return "mixed"
    return "worse" if worse else "better" if better else "within-noise"


def _summary(index: int, base_index: int, overall: Overall, checks: list[Check], rows: list[MetricComparison]) -> str:
    head = f"run [{index}] vs baseline [{base_index}]: {overall}"
    blocking = [c.message for c in checks if c.severity == "blocking"]
    if blocking:
        return f"{head}: {blocking[0]}" + (f" (+{len(blocking) - 1} more)" if len(blocking) > 1 else "")
    parts: list[str] = []
    for verdict, label in (("worse", "regressed"), ("better", "improved")):
        hits = sorted((m for m in rows if m.verdict == verdict), key=lambda m: -abs(m.delta_pct or 0.0))
        if hits:
            shown = ", ".join(_fmt_row(m) for m in hits[:3])
            parts.append(f"{label} {shown}" + (f" and {len(hits) - 3} more" if len(hits) > 3 else ""))
    quiet = sum(m.verdict == "within-noise" for m in rows)
    if quiet:
        parts.append(f"{quiet} within noise")
    decided = [m for m in rows if m.verdict in ("better", "worse")]
    if decided and all(m.basis == "threshold" for m in decided):
        parts.append("threshold verdicts only (no per-request data): weaker evidence")
    cautions = sum(c.severity == "caution" for c in checks)
    if cautions:
        parts.append(f"{cautions} caution(s)")
    return head + (": " + "; ".join(parts) if parts else "")


def _text(value: object) -> str | None:
    """A descriptive field of a result file as text; anything else (a list, an object) is not one."""
    return str(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else None


def _run_info(index: int, run: LoadedRun) -> RunInfo:
    tag = run.data.get("vllm_tune")
    per = [name for name, values in (("ttft", run.ttfts), ("e2el", run.e2els), ("tpot", run.tpots)) if values]
    capacity = run.format == "vllm-tune-capacity"
    return RunInfo(index=index, ref=run.ref, path=str(run.path), format=run.format, detailed=run.detailed,
                   run_id=_text(tag.get("run_id")) if isinstance(tag, dict) else None,
                   label=_text(run.data.get("label")), date=_text(run.data.get("date")),
                   model=_text(run.provenance.get("model")) or _text(run.data.get("model_id")),
                   server_version=_text(run.provenance.get("server_version")),
                   completed=None if capacity else run.completed, failed=None if capacity else run.failed,
                   per_request=per, notes=run.notes)


def _compare_pair(base: LoadedRun, cand: LoadedRun, index: int, base_index: int,
                  req: CompareInput) -> CandidateComparison:
    checks = compare_checks(base, cand)
    if base.path.resolve() == cand.path.resolve():
        checks.insert(0, Check(id="run.same-file", severity="caution", knowledge_ids=[AB_ID],
                               message=f"the candidate is the baseline's own file ({base.path}): nothing to compare"))
    rows: list[MetricComparison] = []
    rounds: int | None = None
    if base.format == "vllm-tune-capacity" and cand.format == "vllm-tune-capacity":
        rows = capacity_rows(base.data["capacity"], cand.data["capacity"], noise_pct=req.noise_threshold_pct)
    elif base.format != "vllm-tune-capacity" and cand.format != "vllm-tune-capacity":
        explicit = req.metrics is not None
        for metric in req.metrics or list(DEFAULT_METRICS):
            if metric in LATENCY_METRICS:
                got, used = _latency_rows(base, cand, metric, req, f"{req.seed}:{index}:{metric}", explicit)
                rows += got
                rounds = used if used is not None else rounds
            else:
                row = _rate_row(base, cand, metric, req, explicit)
                if row is not None:
                    rows.append(row)
    blocked = any(c.severity == "blocking" for c in checks)
    if blocked:
        rows = [m.model_copy(update={"verdict": "not-comparable"}) for m in rows]
    overall = _overall(checks, rows)
    server_rows: list[ServerDiff] = []
    why: list[ServerExplanation] = []
    sa, sb = base.data.get("server"), cand.data.get("server")
    if isinstance(sa, dict) and isinstance(sb, dict) and sa.get("scrapes") and sb.get("scrapes"):
        server_rows, why = server_differences(sa, sb)
    ids: list[str] = [AB_ID]
    if any(m.basis == "bootstrap" for m in rows):
        ids.append(BOOTSTRAP_ID)
    if any(m.basis == "threshold" for m in rows):
        ids.append(THRESHOLD_ID)
    for c in checks:
        ids += c.knowledge_ids
    for w in why:
        ids += w.knowledge_ids
    return CandidateComparison(candidate=index, baseline=base_index, overall=overall,
                               summary=_summary(index, base_index, overall, checks, rows), checks=checks,
                               metrics=rows, server=server_rows, likely_why=why, resamples=rounds,
                               knowledge_ids=list(dict.fromkeys(ids)))


def compare_runs(req: CompareInput) -> CompareOutput:
    """Compare every run with the baseline run; reads files only."""
    runs = load_runs(req.runs, req.results_dir)
    base = runs[req.baseline]
    comparisons = [_compare_pair(base, run, i, req.baseline, req) for i, run in enumerate(runs) if i != req.baseline]
    ids = list(dict.fromkeys(k for c in comparisons for k in c.knowledge_ids))
    return CompareOutput(baseline=req.baseline, runs=[_run_info(i, r) for i, r in enumerate(runs)],
                         comparisons=comparisons, confidence=req.confidence, method=METHOD,
                         knowledge_ids=ids)
