"""Latency percentiles over the window from vLLM's histograms, each with its bucket-resolution caveat."""

from __future__ import annotations

import math

from vllm_tune.tools.diagnose import names
from vllm_tune.tools.diagnose.models import Latency, Percentiles
from vllm_tune.tools.diagnose.quantiles import describe_resolution, histogram_quantile
from vllm_tune.tools.diagnose.snapshot import Histogram
from vllm_tune.tools.diagnose.window import Window

FEW_OBSERVATIONS = 20


def percentiles(label: str, hist: Histogram) -> Percentiles | None:
    count = hist.total
    if count <= 0:
        return None
    qs = {q: histogram_quantile(q, hist) for q in (0.5, 0.9, 0.99)}
    caveats = [c for q in (0.9, 0.99) if (c := describe_resolution(label, qs[q])) is not None]
    if count < FEW_OBSERVATIONS:
        caveats.append(f"{label}: only {int(count)} observations in the window; percentiles are rough")

    def ms(q: float) -> float | None:
        v = qs[q].value
        return None if math.isnan(v) else v * 1000.0

    p90 = qs[0.9]
    bucket = None if math.isnan(p90.lower) else (p90.lower * 1000.0, p90.upper * 1000.0)
    return Percentiles(count=int(count), mean_ms=hist.sum / count * 1000.0 if hist.count > 0 else None,
                       p50_ms=ms(0.5), p90_ms=ms(0.9), p99_ms=ms(0.99), p90_bucket_ms=bucket, caveats=caveats)


def latency_from_window(window: Window) -> tuple[Latency, dict[str, Histogram]]:
    out = Latency()
    hists: dict[str, Histogram] = {}
    for short, metric in names.LATENCY_HISTOGRAMS.items():
        hist = window.histogram(metric)
        if hist is None:
            continue
        hists[short] = hist
        setattr(out, short, percentiles(short.upper(), hist))
    return out, hists
