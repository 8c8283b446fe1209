"""Latency percentiles over the window from vLLM's histograms, as values where the buckets allow and bounds where
they do not, each metric with its bucket-resolution caveat."""

from __future__ import annotations

from vllm_tune.tools.diagnose import names
from vllm_tune.tools.diagnose.models import Latency, Percentile, Percentiles
from vllm_tune.tools.diagnose.quantiles import WIDE_BUCKET_RATIO, exposed_edges, percentile_bounds
from vllm_tune.tools.diagnose.snapshot import Histogram
from vllm_tune.tools.diagnose.window import Window

FEW_OBSERVATIONS = 20
REPORTED = (50.0, 90.0, 95.0, 99.0)
_LABELS = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT", "e2el": "E2EL", "queue": "queue time",
           "prefill": "prefill time", "decode": "decode time", "inference": "inference time"}


def _ms(x: float) -> float:
    return round(x * 1000.0, 6)


def percentile(q_pct: float, hist: Histogram) -> Percentile | None:
    found = percentile_bounds(q_pct / 100.0, hist)
    if found is None:
        return None
    qv, kind = found
    if kind == "exact":
        value = _ms(hist.sum / hist.count)
        return Percentile(q=q_pct, kind="exact", value_ms=value, lower_ms=value, upper_ms=value,
                          text=f"{value:.1f} ms (one observation)")
    if kind == "above_last_edge":
        edge = _ms(qv.lower)
        return Percentile(q=q_pct, kind=kind, value_ms=None, lower_ms=edge, upper_ms=None, text=f"> {edge:g} ms")
    if kind == "below_first_edge":
        edge = _ms(qv.upper)
        return Percentile(q=q_pct, kind=kind, value_ms=None, lower_ms=0.0, upper_ms=edge, text=f"< {edge:g} ms")
    lo, hi = _ms(qv.lower), _ms(qv.upper)
    value = _ms(qv.value)
    return Percentile(q=q_pct, kind="interpolated", value_ms=value, lower_ms=lo, upper_ms=hi,
                      text=f"{value:.1f} ms ({lo:g}-{hi:g} ms bucket)")


def _caveat(label: str, p: Percentile) -> str | None:
    tag = f"p{p.q:g}"
    if p.kind == "below_first_edge":
        return f"{label} {tag} lies in the first bucket: only {p.text} is known"
    if p.kind == "above_last_edge":
        return f"{label} {tag} lies above the last finite bucket edge: only {p.text} is known"
    if p.kind == "interpolated" and p.upper_ms is not None and (
            p.lower_ms <= 0 or p.upper_ms / p.lower_ms >= WIDE_BUCKET_RATIO):
        return (f"{label} {tag} lies in the {p.lower_ms:g}-{p.upper_ms:g} ms bucket; the value is interpolated and "
                "may be off by up to the bucket width")
    return None


def distribution(short: str, hist: Histogram, *, slo_percentile: float = 90.0) -> Percentiles | None:
    count = hist.total
    if count <= 0:
        return None
    label = _LABELS.get(short, short.upper())
    out = Percentiles(count=int(count), mean_ms=_ms(hist.sum / hist.count) if hist.count > 0 else None,
                      bucket_edges_ms=[_ms(e) for e in exposed_edges(hist)])
    for q in REPORTED:
        setattr(out, f"p{q:g}", percentile(q, hist))
    judged = out.at(slo_percentile) or percentile(slo_percentile, hist)
    # One caveat per metric: the percentile the SLO is judged at, or the median when that one is fine.
    for p in (judged, out.p50):
        if p is not None and (c := _caveat(label, p)) is not None:
            mean = f"; mean {out.mean_ms:.1f} ms from _sum/_count" if out.mean_ms is not None else ""
            out.caveats.append(c + mean)
            break
    if count < FEW_OBSERVATIONS:
        out.caveats.append(f"{label}: only {int(count)} observations in the window; percentiles are rough")
    return out


def latency_from_window(window: Window, *, slo_percentile: float = 90.0) -> tuple[Latency, dict[str, Histogram]]:
    out = Latency()
    hists: dict[str, Histogram] = {}
    for short, metric in names.LATENCY_HISTOGRAMS.items():
        hist = window.histogram(metric)
        if hist is None:
            continue
        hists[short] = hist
        setattr(out, short, distribution(short, hist, slo_percentile=slo_percentile))
    return out, hists
