"""Passive calibration: fit the step model from a /metrics window of a server under its own traffic.

Nothing is sent but GET /metrics. Between two scrapes, vllm:iteration_tokens_total counts the engine
steps (one observation per step), prompt_tokens_total and generation_tokens_total the tokens they
carried, and inter_token_latency_seconds the gaps between tokens, whose mean is the mean step time
seen by decoding requests. Each interval gives one equation
    mean ITL = fixed + b * (generated tokens per step) + c * (prompt tokens per step),
and traffic that varies over the window separates the terms. Context cost and the request hand-off
are not observable this way and stay 0 (the result says so).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise

import httpx

from vllm_tune.tools.bench.server_watch import cache_config_labels, parse_scrape
from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.net.targets import TargetPolicy
from vllm_tune.tools.whatif.calibrate import Calibration, Residual, engine_from
from vllm_tune.tools.whatif.fit import nonnegative_least_squares
from vllm_tune.tools.whatif.simulate import StepModel

_SERIES = {
    "vllm:iteration_tokens_total_count": "steps",
    "vllm:prompt_tokens_total": "prompt",
    "vllm:generation_tokens_total": "gen",
    "vllm:inter_token_latency_seconds_sum": "itl_sum",
    "vllm:inter_token_latency_seconds_count": "itl_count",
}
MIN_INTERVALS = 4
MIN_STEPS = 5


@dataclass
class MetricsPoint:
    t: float
    values: dict[str, float] = field(default_factory=dict)
    cache_config: dict[str, str] = field(default_factory=dict)


def parse_metrics(text: str, t: float) -> MetricsPoint:
    """The series the fit needs, read by run_benchmark's own scrape parser (summed over engines)."""
    scrape = parse_scrape(text, t)
    values = {key: scrape.counters[name] for name, key in _SERIES.items() if name in scrape.counters}
    return MetricsPoint(t, values, cache_config_labels(text))


def fit_window(points: list[MetricsPoint], serve_flags: dict[str, str] | None = None,
               conditions: dict[str, object] | None = None) -> Calibration:
    """Fit the step model on consecutive scrapes (at least MIN_INTERVALS busy intervals)."""
    rows: list[list[float]] = []
    ys: list[float] = []
    labels: list[str] = []
    for a, b in pairwise(points):
        d = {k: b.values.get(k, 0.0) - a.values.get(k, 0.0) for k in _SERIES.values()}
        if d["steps"] < MIN_STEPS or d["itl_count"] <= 0:
            continue
        y = d["itl_sum"] / d["itl_count"]
        if y <= 0:
            continue
        rows.append([1.0 / y, d["gen"] / d["steps"] / y, d["prompt"] / d["steps"] / y])
        ys.append(1.0)
        labels.append(f"t={b.t - points[0].t:.0f}s")
    if len(rows) < MIN_INTERVALS:
        raise BadInputError(f"not enough data: {len(rows)} busy intervals in the window (need {MIN_INTERVALS}); "
                            "widen the window or calibrate while traffic flows")
    coef = nonnegative_least_squares(rows, ys, [True, True, True])
    if coef is None:
        raise BadInputError("not enough data: the traffic in the window did not vary enough to separate step costs")
    model = StepModel(fixed_s=coef[0], per_decode_seq_s=coef[1], per_prefill_token_s=coef[2],
                      per_context_token_s=0.0, request_overhead_s=0.0)
    residuals = []
    for label, row in zip(labels, rows, strict=True):
        measured = 1.0 / row[0]
        fitted = model.fixed_s + model.per_decode_seq_s * row[1] * measured + model.per_prefill_token_s * row[2] * \
            measured
        residuals.append(Residual(run=label, metric="mean_itl_ms", measured=measured * 1e3, fitted=fitted * 1e3,
                                  relative_error=(fitted - measured) / measured))
    cache = next((p.cache_config for p in points if p.cache_config), {})
    cal = Calibration(step_model=model, engine=engine_from(cache, serve_flags), source="metrics",
                      conditions={**(conditions or {}), "intervals": len(rows)}, rounds=1, converged=True,
                      residuals=residuals,
                      notes=["passive fit: per-context-token cost and request hand-off are not observable from "
                             "/metrics and are 0; prefer a probe or saved results when they matter"])
    cal.max_abs_relative_error = max(abs(r.relative_error) for r in residuals)
    return cal


async def calibrate_from_metrics(url: str, *, window_s: float = 30.0, interval_s: float = 2.0,
                                 serve_flags: dict[str, str] | None = None,
                                 policy: TargetPolicy | None = None) -> Calibration:
    """Scrape url/metrics every interval_s for window_s (GET only) and fit the window."""
    pol = policy or TargetPolicy.from_env()
    base = pol.check(url)
    if not 4 * interval_s <= window_s <= 600:
        raise BadInputError("the metrics window must last 4 intervals to 600 s")
    points: list[MetricsPoint] = []
    async with httpx.AsyncClient(base_url=base, timeout=10.0, follow_redirects=False) as client:
        end = time.monotonic() + window_s
        while True:
            try:
                resp = await client.get("/metrics")
            except httpx.HTTPError as exc:
                raise TargetError(f"cannot scrape {base}/metrics: {type(exc).__name__}") from None
            if resp.status_code != 200:
                raise TargetError(f"{base}/metrics answered HTTP {resp.status_code}")
            points.append(parse_metrics(resp.text, time.monotonic()))
            if time.monotonic() >= end:
                break
            await asyncio.sleep(interval_s)
    return fit_window(points, serve_flags, {"url": base, "window_s": window_s, "interval_s": interval_s,
                                            "date": datetime.now(UTC).isoformat()})
