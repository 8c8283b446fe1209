"""Histogram quantiles with the semantics of PromQL's histogram_quantile, plus an honest resolution caveat.

The algorithm follows Prometheus' bucketQuantile (promql/quantile.go): buckets sorted by upper bound, the last
must be +Inf; rank = q * total; the first bucket whose cumulative count reaches the rank holds the quantile,
which is interpolated linearly inside it (the lower edge of the first bucket is 0 when its upper bound is
positive); a quantile that lands in the +Inf bucket returns the largest finite bound. Cumulative counts that
decrease (scrape races) are forced monotonic, as Prometheus does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_tune.tools.diagnose.snapshot import Histogram

# A bucket whose upper edge is at least this multiple of its lower edge is "wide": the interpolated value can be
# far from the truth (e.g. TTFT's 0.25 -> 0.5 s bucket).
WIDE_BUCKET_RATIO = 1.5


@dataclass(frozen=True)
class Quantile:
    q: float
    value: float  # NaN when undefined (no observations)
    lower: float  # the bucket that holds the quantile
    upper: float
    in_overflow: bool  # landed in the +Inf bucket: the true value is above `value`

    @property
    def wide(self) -> bool:
        if self.in_overflow:
            return True
        if self.lower <= 0:
            return self.upper > 0
        return self.upper / self.lower >= WIDE_BUCKET_RATIO


def _monotonic(counts: list[float]) -> list[float]:
    out: list[float] = []
    high = 0.0
    for c in counts:
        high = max(high, c)
        out.append(high)
    return out


def histogram_quantile(q: float, hist: Histogram) -> Quantile:
    """PromQL histogram_quantile(q, ...) on one (already summed/delta'd) histogram."""
    nan = math.nan
    if math.isnan(q):
        return Quantile(q, nan, nan, nan, False)
    if q < 0:
        return Quantile(q, -math.inf, -math.inf, -math.inf, False)
    if q > 1:
        return Quantile(q, math.inf, math.inf, math.inf, True)
    bounds = hist.bounds
    if len(bounds) < 2 or not math.isinf(bounds[-1]):
        return Quantile(q, nan, nan, nan, False)
    counts = _monotonic(hist.cumulative)
    total = counts[-1]
    if total <= 0:
        return Quantile(q, nan, nan, nan, False)
    rank = q * total
    b = len(bounds) - 1
    for i in range(len(bounds) - 1):
        if counts[i] >= rank:
            b = i
            break
    if b == len(bounds) - 1:
        top = bounds[-2]
        return Quantile(q, top, top, math.inf, True)
    if b == 0 and bounds[0] <= 0:
        return Quantile(q, bounds[0], bounds[0], bounds[0], False)
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    value = start + (end - start) * (rank / count) if count > 0 else end
    return Quantile(q, value, start, end, False)


def fraction_at_or_below(hist: Histogram, x: float) -> float | None:
    """Share of observations <= x, interpolated linearly inside the bucket holding x (None if empty)."""
    bounds, counts = hist.bounds, _monotonic(hist.cumulative)
    if not counts or counts[-1] <= 0:
        return None
    total = counts[-1]
    prev_bound, prev_count = 0.0, 0.0
    for bound, cum in zip(bounds, counts, strict=True):
        if x <= bound:
            if math.isinf(bound):
                return prev_count / total
            width = bound - prev_bound
            share = (x - prev_bound) / width if width > 0 else 1.0
            return (prev_count + (cum - prev_count) * max(0.0, min(1.0, share))) / total
        prev_bound, prev_count = bound, cum
    return 1.0


def describe_resolution(name: str, qv: Quantile, scale: float = 1000.0, unit: str = "ms") -> str | None:
    """A caveat sentence when the quantile sits in a wide bucket or the overflow bucket."""
    if math.isnan(qv.value):
        return None
    pct = f"p{round(qv.q * 100):d}"
    if qv.in_overflow:
        return (f"{name} {pct} is above the largest finite bucket bound ({qv.lower * scale:g} {unit}); "
                "the reported value is that bound, a lower limit")
    if qv.wide:
        return (f"{name} {pct} lies in the {qv.lower * scale:g}-{qv.upper * scale:g} {unit} bucket; the value is "
                "interpolated and may be off by up to the bucket width")
    return None


def exposed_edges(hist: Histogram) -> list[float]:
    """The finite bucket edges of a histogram (the server's --custom-histogram-buckets or vLLM's defaults)."""
    return [b for b in hist.bounds if not math.isinf(b)]


def percentile_bounds(q: float, hist: Histogram) -> tuple[Quantile, str] | None:
    """The quantile with its kind: exact (one observation: the mean is the value), interpolated, below the
    first edge (only an upper bound is known) or above the last finite edge (only a lower bound)."""
    qv = histogram_quantile(q, hist)
    if math.isnan(qv.value) or hist.total <= 0:
        return None
    if hist.total == 1 and hist.count == 1:
        return qv, "exact"
    if qv.in_overflow:
        return qv, "above_last_edge"
    if qv.lower <= 0 and hist.bounds and qv.upper == hist.bounds[0]:
        return qv, "below_first_edge"
    return qv, "interpolated"
