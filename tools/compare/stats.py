"""Statistics for a before/after comparison: per-request bootstrap, thresholds and the verdict rule.

The bootstrap resamples each run's requests with replacement, independently, recomputes the statistic
(mean or a percentile) on both, and takes the central `confidence` share of the differences as the
interval. It captures the sampling noise of the requests inside each run, not run-to-run drift (a
warmer cache, a busier host), so a verdict also needs a minimum practical effect. Work is bounded: at
most MAX_RESAMPLES resamples and about DRAW_BUDGET drawn values per metric, in plain Python.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from vllm_tune.tools.bench.metrics import percentile

Direction = Literal["lower", "higher"]
Verdict = Literal["better", "worse", "within-noise", "not-comparable"]
Basis = Literal["bootstrap", "threshold", "none"]

MAX_RESAMPLES = 2_000
MIN_RESAMPLES = 200
DRAW_BUDGET = 4_000_000


def statistic(sorted_values: list[float], stat: str) -> float:
    """'mean', 'median' or 'pNN' of already sorted values; percentiles as tools.bench.metrics computes them."""
    if not sorted_values:
        return math.nan
    if stat == "mean":
        return sum(sorted_values) / len(sorted_values)
    if stat == "median":
        return percentile(sorted_values, 50.0)
    if stat.startswith("p"):
        return percentile(sorted_values, float(stat[1:]))
    raise ValueError(f"unknown statistic {stat!r}")


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def resample_count(n_base: int, n_cand: int, requested: int = MAX_RESAMPLES) -> int:
    """As many resamples as asked (<= MAX_RESAMPLES), fewer for very large runs so the work stays bounded."""
    cap = DRAW_BUDGET // max(1, n_base + n_cand)
    return max(MIN_RESAMPLES, min(requested, MAX_RESAMPLES, cap))


def bootstrap_differences(base: list[float], cand: list[float], stats: list[str], *, confidence: float,
                          seed: int | str, resamples: int = MAX_RESAMPLES) -> tuple[dict[str, Interval], int]:
    """Interval of (candidate statistic - baseline statistic) for each statistic, from one set of resamples."""
    if not base or not cand:
        return {}, 0
    rng = random.Random(seed)  # str seeds hash with sha512: reproducible across processes
    rounds = resample_count(len(base), len(cand), resamples)
    diffs: dict[str, list[float]] = {s: [] for s in stats}
    nb, nc = len(base), len(cand)
    for _ in range(rounds):
        b = sorted(rng.choices(base, k=nb))
        c = sorted(rng.choices(cand, k=nc))
        for s in stats:
            diffs[s].append(statistic(c, s) - statistic(b, s))
    tail = (1.0 - confidence) / 2.0 * 100.0
    out: dict[str, Interval] = {}
    for s, values in diffs.items():
        values.sort()
        out[s] = Interval(percentile(values, tail), percentile(values, 100.0 - tail))
    return out, rounds


def relative_change(base: float, cand: float) -> float | None:
    """Percent change from base; None when base is zero (no meaningful ratio)."""
    if base == 0 or math.isnan(base) or math.isnan(cand):
        return None
    return (cand - base) / abs(base) * 100.0


def judge(base: float, cand: float, better_when: Direction, *, interval: Interval | None,
          noise_pct: float, min_effect_pct: float) -> tuple[Verdict, Basis]:
    """better / worse / within-noise for one metric; the basis says how strong the verdict is."""
    delta = cand - base
    pct = relative_change(base, cand)
    improved = delta < 0 if better_when == "lower" else delta > 0
    if interval is not None:
        large_enough = pct is None or abs(pct) >= min_effect_pct
        if interval.excludes_zero() and large_enough and delta != 0:
            return ("better" if improved else "worse"), "bootstrap"
        return "within-noise", "bootstrap"
    if delta == 0:
        return "within-noise", "threshold"
    if pct is None or abs(pct) >= noise_pct:
        return ("better" if improved else "worse"), "threshold"
    return "within-noise", "threshold"
