"""Compare two capacity searches by what they answer: capacity under the SLO, saturation and the knee.

The search bisects until its bracket is within 10 % (tools/bench/capacity.py), so a capacity that
moved by less than that is within the search's own resolution, whatever the noise.
"""

from __future__ import annotations

from typing import Any

from vllm_tune.tools.bench.metrics import percentile_label
from vllm_tune.tools.compare.models import MetricComparison
from vllm_tune.tools.compare.stats import Direction, judge, relative_change

SEARCH_RESOLUTION_PCT = 10.0


def _get(block: dict[str, Any], path: str) -> float | None:
    value: Any = block
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def capacity_rows(base: dict[str, Any], cand: dict[str, Any], *, noise_pct: float) -> list[MetricComparison]:
    unit = "req/s" if base.get("variable") == "rate" else "concurrent requests"
    label = percentile_label(float(base.get("slo_percentile") or 99.0))
    rows: tuple[tuple[str, str, str, Direction], ...] = (("capacity", "capacity", unit, "higher"),
            ("capacity_request_throughput", "capacity_request_throughput", "req/s", "higher"),
            ("max_throughput", "max_throughput", "req/s", "higher"),
            ("knee_throughput", "knee.achieved_request_throughput", "req/s", "higher"),
            (f"knee_{label}_e2el", f"knee.latencies_ms.{label}_e2el", "ms", "lower"))
    threshold = max(noise_pct, SEARCH_RESOLUTION_PCT)
    out: list[MetricComparison] = []
    for metric, path, row_unit, better in rows:
        a, b = _get(base, path), _get(cand, path)
        if a is None and b is None:
            continue
        if a is None or b is None:
            missing = "baseline" if a is None else "candidate"
            note = f"missing in the {missing}" + (": no tested load met the SLO" if metric == "capacity" else "")
            out.append(MetricComparison(metric=metric, statistic="value", key=path, unit=row_unit,
                                        better_when=better, baseline=a, candidate=b, delta=None, delta_pct=None,
                                        basis="none", verdict="not-comparable", note=note))
            continue
        verdict, basis = judge(a, b, better, interval=None, noise_pct=threshold, min_effect_pct=threshold)
        out.append(MetricComparison(metric=metric, statistic="value", key=path, unit=row_unit,
                                    better_when=better, baseline=a, candidate=b, delta=b - a,
                                    delta_pct=relative_change(a, b), basis=basis, verdict=verdict,
                                    note=f"capacity search resolution is about {SEARCH_RESOLUTION_PCT:g} %; "
                                         f"changes below {threshold:g} % count as within noise"))
    return out
