"""Two snapshots -> what happened between them; one snapshot -> the server's lifetime, labelled as such.

Counters and histograms become deltas summed over the selected series; gauges are read at each scrape taken
during the window (`samples`), so means and maxima of running/waiting/KV usage come from observation, not from
the two end points only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from vllm_tune.tools.diagnose.snapshot import Histogram, LabelKey, Snapshot

WindowKind = Literal["window", "lifetime"]


def _delta_hist(after: Histogram, before: Histogram | None) -> tuple[Histogram, bool]:
    """after - before per bucket; (after, True) on a counter reset (the count went down)."""
    if before is None:
        return after, False
    if after.count < before.count or after.bounds != before.bounds:
        return after, after.count < before.count
    cum = [a - b for a, b in zip(after.cumulative, before.cumulative, strict=True)]
    return Histogram(list(after.bounds), cum, after.sum - before.sum, after.count - before.count), False


def merge_histograms(hists: list[Histogram]) -> Histogram | None:
    """Sum histograms bucket by bucket (PromQL's `sum by (le)`)."""
    if not hists:
        return None
    if len(hists) == 1:
        return hists[0]
    buckets: dict[float, float] = {}
    total_sum = total_count = 0.0
    for h in hists:
        for bound, cum in zip(h.bounds, h.cumulative, strict=True):
            buckets[bound] = buckets.get(bound, 0.0) + cum
        total_sum += h.sum
        total_count += h.count
    bounds = sorted(buckets)
    return Histogram(bounds, [buckets[b] for b in bounds], total_sum, total_count)


@dataclass
class GaugeSeries:
    """One gauge summed over engines (and its per-engine maximum) at each scrape time."""

    times: list[float]
    totals: list[float]
    per_engine_max: list[float]

    @property
    def mean(self) -> float:
        return sum(self.totals) / len(self.totals)

    @property
    def max(self) -> float:
        return max(self.totals)

    def slope_per_s(self) -> float | None:
        """Least-squares slope over time; None with fewer than two distinct times."""
        n = len(self.times)
        if n < 2 or max(self.times) - min(self.times) <= 0:
            return None
        mt, mv = sum(self.times) / n, sum(self.totals) / n
        var = sum((t - mt) ** 2 for t in self.times)
        return sum((t - mt) * (v - mv) for t, v in zip(self.times, self.totals, strict=True)) / var


@dataclass
class Window:
    after: Snapshot
    before: Snapshot | None = None
    seconds: float | None = None
    samples: list[Snapshot] = field(default_factory=list)  # every scrape in time order, ends included
    caveats: list[str] = field(default_factory=list)
    resets: set[str] = field(default_factory=set)

    @property
    def kind(self) -> WindowKind:
        return "window" if self.before is not None else "lifetime"

    @property
    def rates_known(self) -> bool:
        return self.seconds is not None and self.seconds > 0

    # -- counters -------------------------------------------------------------------------------------
    def counter(self, name: str, dims: dict[str, str] | None = None) -> float | None:
        """Delta (or lifetime total) of a counter summed over series; None if the server does not export it."""
        series = self.after.counters.get(name)
        if series is None:
            return None
        prior = self.before.counters.get(name, {}) if self.before is not None else {}
        want = tuple(sorted((dims or {}).items()))
        total = 0.0
        for key, value in series.items():
            if want and not set(want) <= set(key[1]):
                continue
            old = prior.get(key)
            if old is None or self.before is None:
                total += value
            elif value < old:
                self.resets.add(name)
                total += value
            else:
                total += value - old
        return total

    def counter_by_dim(self, name: str, dim: str) -> dict[str, float]:
        out: dict[str, float] = {}
        series = self.after.counters.get(name, {})
        for _, dims in series:
            value = dict(dims).get(dim)
            if value is not None and value not in out:
                out[value] = self.counter(name, {dim: value}) or 0.0
        return out

    def rate(self, name: str, dims: dict[str, str] | None = None) -> float | None:
        delta = self.counter(name, dims)
        if delta is None or not self.rates_known:
            return None
        assert self.seconds is not None
        return delta / self.seconds

    # -- histograms -----------------------------------------------------------------------------------
    def histogram(self, name: str) -> Histogram | None:
        series = self.after.histograms.get(name)
        if not series:
            return None
        prior = self.before.histograms.get(name, {}) if self.before is not None else {}
        parts: list[Histogram] = []
        for ident, hist in series.items():
            delta, reset = _delta_hist(hist, prior.get(ident))
            if reset:
                self.resets.add(name)
            parts.append(delta)
        return merge_histograms(parts)

    def histogram_per_identity(self, name: str) -> dict[LabelKey, Histogram]:
        series = self.after.histograms.get(name, {})
        prior = self.before.histograms.get(name, {}) if self.before is not None else {}
        return {ident: _delta_hist(h, prior.get(ident))[0] for ident, h in series.items()}

    # -- gauges ---------------------------------------------------------------------------------------
    def gauge_series(self, name: str, dims: dict[str, str] | None = None) -> GaugeSeries | None:
        snaps = self.samples or [s for s in (self.before, self.after) if s is not None]
        times: list[float] = []
        totals: list[float] = []
        maxima: list[float] = []
        want = set((dims or {}).items())
        for i, snap in enumerate(snaps):
            series = snap.gauges.get(name)
            if series is None:
                continue
            values = [v for (_, d), v in series.items() if want <= set(d)]
            if not values:
                continue
            times.append(snap.timestamp if snap.timestamp is not None else float(i))
            totals.append(sum(values))
            maxima.append(max(values))
        if not totals:
            return None
        return GaugeSeries(times, totals, maxima)

    def gauge_now_per_identity(self, name: str) -> dict[LabelKey, float]:
        out: dict[LabelKey, float] = {}
        for (ident, dims), value in self.after.gauges.get(name, {}).items():
            if not dims:
                out[ident] = value
        return out

    @property
    def n_samples(self) -> int:
        return len(self.samples) if self.samples else (2 if self.before is not None else 1)
