"""One scrape of vLLM metrics, organised by canonical name and by the series' identity labels.

A series' identity is every label that says where it comes from (engine, model_name, and under Prometheus also
instance, pod, job...); labels such as finished_reason or reason split one quantity into parts (dimensions).
Several engines (data parallel) and several models are kept apart here and summed only when analysed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from vllm_tune.tools.diagnose import names
from vllm_tune.tools.diagnose.parse import RawSample, iter_exposition
from vllm_tune.tools.errors import BadInputError

LabelKey = tuple[tuple[str, str], ...]

# Labels of the cache_config_info series that identify its source; all others are configuration values.
_INFO_IDENTITY = frozenset({"engine", "model_name", "instance", "job", "pod", "namespace", "replica", "container"})
_DROPPED = frozenset({"le", "__name__", "pid"})


@dataclass
class Histogram:
    """A cumulative histogram: upper bounds in increasing order (the last is +Inf) and cumulative counts."""

    bounds: list[float]
    cumulative: list[float]
    sum: float = 0.0
    count: float = 0.0

    @property
    def total(self) -> float:
        return self.cumulative[-1] if self.cumulative else self.count


@dataclass
class _HistBuilder:
    buckets: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float = 0.0

    def build(self) -> Histogram:
        bounds = sorted(self.buckets)
        return Histogram(bounds, [self.buckets[b] for b in bounds], self.sum, self.count)


@dataclass
class Snapshot:
    source: str
    timestamp: float | None = None
    # canonical name -> (identity, dimensions) -> value; counters are stored without `_total`
    gauges: dict[str, dict[tuple[LabelKey, LabelKey], float]] = field(default_factory=dict)
    counters: dict[str, dict[tuple[LabelKey, LabelKey], float]] = field(default_factory=dict)
    histograms: dict[str, dict[LabelKey, Histogram]] = field(default_factory=dict)
    cache_config: dict[LabelKey, dict[str, str]] = field(default_factory=dict)
    legacy_names: set[str] = field(default_factory=set)
    v0_names: set[str] = field(default_factory=set)
    http_requests: dict[str, float] = field(default_factory=dict)  # status class ("2xx"...) -> count
    process_start_time: float | None = None
    multiprocess: bool = False
    has_process_metrics: bool = False

    def identities(self) -> set[LabelKey]:
        keys: set[LabelKey] = set()
        for table in (self.gauges, self.counters):
            for series in table.values():
                keys.update(ident for ident, _ in series)
        for hseries in self.histograms.values():
            keys.update(hseries)
        return keys

    def model_names(self) -> list[str]:
        return sorted({v for key in self.identities() for k, v in key if k == "model_name"})

    def engines(self) -> list[LabelKey]:
        """Distinct engines (with their instance/pod labels under Prometheus), from the per-engine gauges."""
        series = self.gauges.get("num_requests_running") or {}
        keys = {ident for ident, _ in series} or {ident for ident in self.identities() if dict(ident).get("engine")}
        return sorted({tuple((k, v) for k, v in key if k != "model_name") for key in keys})

    def select(self, model: str | None, match: dict[str, str] | None = None) -> Snapshot:
        """Only the series of one model (and matching extra labels); series without that label are kept."""
        if not model and not match:
            return self
        want = dict(match or {})
        if model:
            want["model_name"] = model

        def keep(ident: LabelKey) -> bool:
            d = dict(ident)
            return all(d.get(k, v) == v for k, v in want.items())

        out = Snapshot(self.source, self.timestamp, legacy_names=self.legacy_names, v0_names=self.v0_names,
                       http_requests=self.http_requests, process_start_time=self.process_start_time,
                       multiprocess=self.multiprocess, has_process_metrics=self.has_process_metrics)
        out.gauges = {n: {k: v for k, v in s.items() if keep(k[0])} for n, s in self.gauges.items()}
        out.counters = {n: {k: v for k, v in s.items() if keep(k[0])} for n, s in self.counters.items()}
        out.histograms = {n: {k: h for k, h in s.items() if keep(k)} for n, s in self.histograms.items()}
        out.cache_config = {k: v for k, v in self.cache_config.items() if keep(k)}
        return out

    def has_vllm_series(self) -> bool:
        return bool(self.gauges or self.counters or self.histograms)


class _Builder:
    """One pass over the samples; per-sample work is kept small (a 64-engine scrape has ~40k samples)."""

    def __init__(self, source: str) -> None:
        self.snap = Snapshot(source)
        self.hists: dict[str, dict[LabelKey, _HistBuilder]] = {}
        self.key_cache: dict[tuple[tuple[str, str], ...], tuple[LabelKey, LabelKey]] = {}
        self.timestamps: list[float] = []
        # Series under an old name, merged at the end only where the new name is absent (both are exported
        # during a deprecation period and must never be counted twice).
        self.legacy_scalars: dict[tuple[bool, str], dict[tuple[LabelKey, LabelKey], float]] = {}
        self.legacy_hists: dict[str, dict[LabelKey, _HistBuilder]] = {}

    def _keys(self, labels: dict[str, str]) -> tuple[LabelKey, LabelKey]:
        raw = tuple(labels.items())
        hit = self.key_cache.get(raw)
        if hit is None:
            ident = tuple(sorted((k, v) for k, v in raw if k not in names.DIMENSION_LABELS and k not in _DROPPED))
            dims = tuple(sorted((k, v) for k, v in raw if k in names.DIMENSION_LABELS))
            hit = self.key_cache[raw] = (ident, dims)
        return hit

    def add(self, s: RawSample) -> None:
        name = s.name
        if not name.startswith(names.PREFIX):
            self._other(s)
            return
        if s.timestamp is not None:
            self.timestamps.append(s.timestamp)
        stem, part = names.split_sample_name(name)
        if part == "_created":
            return
        base, old = names.canonical(stem)
        if old:
            self.snap.legacy_names.add(old)
        if stem in names.V0_ONLY:
            self.snap.v0_names.add(stem)
        if "pid" in s.labels:
            self.snap.multiprocess = True
        if stem == "cache_config_info":
            ident = tuple(sorted((k, v) for k, v in s.labels.items() if k in _INFO_IDENTITY))
            self.snap.cache_config[ident] = {k: v for k, v in s.labels.items() if k not in _INFO_IDENTITY}
            return
        if part in names.HISTOGRAM_PARTS:
            ident, _ = self._keys(s.labels)
            hists = self.legacy_hists if old else self.hists
            hb = hists.setdefault(base, {}).get(ident)
            if hb is None:
                hb = hists[base][ident] = _HistBuilder()
            if part == "_bucket":
                try:
                    le = float(s.labels.get("le", "+Inf"))
                except ValueError:
                    raise BadInputError(f"{self.snap.source}: a {base}_bucket sample whose le label is not a "
                                        "number") from None
                hb.buckets[le] = hb.buckets.get(le, 0.0) + s.value
            elif part == "_sum":
                hb.sum += s.value
            else:
                hb.count += s.value
            return
        is_counter = part == "_total"
        if old:
            series = self.legacy_scalars.setdefault((is_counter, base), {})
        else:
            series = (self.snap.counters if is_counter else self.snap.gauges).setdefault(base, {})
        key = self._keys(s.labels)
        if key in series:  # the same series again: only under multiprocess `pid` labels
            series[key] = series[key] + s.value if is_counter else max(series[key], s.value)
        else:
            series[key] = s.value

    def _other(self, s: RawSample) -> None:
        name = s.name
        if name == "process_start_time_seconds":
            self.snap.process_start_time = s.value
            self.snap.has_process_metrics = True
        elif name.startswith(("process_", "python_")):
            self.snap.has_process_metrics = True
        elif name == "http_requests_total":
            status = s.labels.get("status", "?")
            self.snap.http_requests[status] = self.snap.http_requests.get(status, 0.0) + s.value

    def finish(self) -> Snapshot:
        for (is_counter, base), legacy in self.legacy_scalars.items():
            table = (self.snap.counters if is_counter else self.snap.gauges).setdefault(base, {})
            for key, value in legacy.items():
                table.setdefault(key, value)
        for base, lseries in self.legacy_hists.items():
            current = self.hists.setdefault(base, {})
            for ident, hb in lseries.items():
                current.setdefault(ident, hb)
        for base, series in self.hists.items():
            self.snap.histograms[base] = {ident: hb.build() for ident, hb in series.items()}
        if self.timestamps:
            # Exposition timestamps are milliseconds since the epoch.
            self.snap.timestamp = max(self.timestamps) / 1000.0
        return self.snap


def snapshot_from_samples(samples: Iterable[RawSample], source: str, *, timestamp: float | None = None,
                          require_vllm: bool = True) -> Snapshot:
    builder = _Builder(source)
    for sample in samples:
        builder.add(sample)
    snap = builder.finish()
    if timestamp is not None:
        snap.timestamp = timestamp
    if require_vllm and not snap.has_vllm_series():
        raise BadInputError(f"{source}: no vllm:* series found; is this the /metrics of a vLLM server?")
    return snap


def parse_snapshot(text: str, source: str, *, timestamp: float | None = None) -> Snapshot:
    """Parse exposition text (a vLLM /metrics body) into a Snapshot."""
    return snapshot_from_samples(iter_exposition(text, source), source, timestamp=timestamp)
