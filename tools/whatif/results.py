"""A simulated run in run_benchmark's result shape, and run_benchmark's load turned into a simulated one.

The result dict carries the same keys and units as a measured run (`vllm bench serve --save-result`
names, tools/bench/metrics.py definitions) so that compare_runs and the tables read both alike; it
is marked `simulated: true` and adds a `simulation` block (queue, KV use and preemptions over time).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from statistics import NormalDist
from typing import Any

from vllm_tune.tools.bench import api as bench_api
from vllm_tune.tools.bench.api import RunBenchmarkInput
from vllm_tune.tools.bench.metrics import MS, check_goodput, describe, percentile, percentile_label
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.whatif.simulate import EngineConfig, Load, StepModel, Trace

MAX_TIMELINE_POINTS = 120


def load_from_request(req: RunBenchmarkInput, lengths: list[tuple[int, int]] | None = None) -> Load:
    """The load run_benchmark would send for `req` (same schedule, same seed), as simulator input.

    Prompt/output lengths: a trace's own, else `lengths` (e.g. a saved result's input_lens/output_lens,
    cycled), else the fixed input_len/output_len."""
    n = min(bench_api._request_count(req), bench_api.MAX_REQUESTS)
    offsets, trace_lens, request_rate = bench_api._schedule(req, n, req.seed, req.rate)
    if offsets is not None:
        n = len(offsets)
    if req.dataset and not lengths:
        raise BadInputError("a dataset workload needs its token lengths: simulate from a saved result of it "
                            "(--from RESULT) or give a trace with input_length/output_length")
    if not lengths and not trace_lens and req.range_ratio > 0:
        # As run_benchmark draws them from the request's seed (bench.api.spread_lengths), warm-up requests first
        w = req.warmup_requests
        lengths = [(i or req.input_len, o or req.output_len) for i, o in
                   bench_api.spread_lengths(n + w, req.input_len, req.output_len, req.range_ratio, req.seed)[w:]]
    lens: list[tuple[int, int]] = []
    for i in range(n):
        tl = trace_lens[i] if trace_lens else (None, None)
        base = lengths[i % len(lengths)] if lengths else (req.input_len, req.output_len)
        lens.append((tl[0] or base[0], tl[1] or base[1]))
    concurrency = req.concurrency if offsets is None else None
    if offsets is None and concurrency is None:
        concurrency = 1
    return Load(lens=lens, offsets=offsets, concurrency=concurrency,
                max_concurrency=req.max_concurrency if offsets is not None else concurrency,
                duration_s=req.duration_s, request_rate=request_rate, burstiness=req.burstiness)


def _weighted_stats(values: list[float], weights: list[float], extra: list[float],
                    percentiles: list[float]) -> dict[str, float]:
    """describe() over the multiset where values[i] occurs weights[i] times, plus `extra` once each (a weight may be
    fractional: gaps of merged chunks count as the share of a step's tokens they stand for)."""
    pairs = sorted([(v * MS, w) for v, w in zip(values, weights, strict=True) if w] + [(v * MS, 1.0) for v in extra])
    total = sum(w for _, w in pairs)
    if not total:
        return {"mean": 0.0, "median": 0.0, "std": 0.0, **{percentile_label(p): 0.0 for p in percentiles}}
    mean = sum(v * w for v, w in pairs) / total
    std = math.sqrt(max(0.0, sum(w * (v - mean) ** 2 for v, w in pairs) / total))
    cum: list[float] = []
    run = 0.0
    for _, w in pairs:
        run += w
        cum.append(run)

    def at_rank(k: float) -> float:  # k-th smallest (0-based) of the expanded multiset
        lo, hi = 0, len(cum) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if cum[mid] > k:
                hi = mid
            else:
                lo = mid + 1
        return pairs[lo][0]

    def pct(p: float) -> float:
        pos = (total - 1) * p / 100.0
        lo = math.floor(pos)
        a, b = at_rank(lo), at_rank(min(lo + 1, total - 1))
        return a + (b - a) * (pos - lo)

    out = {"mean": mean, "median": pct(50.0), "std": std}
    for p in percentiles:
        out[percentile_label(p)] = pct(p)
    return out


SPREAD_POINTS = 16  # quantiles of the log-normal spread each gap is expanded into


def spread_factors(sigma: float) -> list[float]:
    """Equal-weight quantiles of a log-normal factor with the given sigma, scaled to mean exactly 1."""
    if sigma <= 0:
        return [1.0]
    unit = NormalDist()
    raw = [math.exp(sigma * unit.inv_cdf((j + 0.5) / SPREAD_POINTS)) for j in range(SPREAD_POINTS)]
    mean = sum(raw) / len(raw)
    return [f / mean for f in raw]


def chunk_gaps(tr: Trace, steady: list[int], per_stream_s: float) -> tuple[list[float], list[float]]:
    """(gap, count) per step as the client counts them. When the API server's round over the streams a step fed
    (streams x per_stream_s) outlasts the step, vLLM's per-request output collector merges what a stream has not
    sent yet (vllm/v1/engine/output_processor.py:53-93 at v0.32.0): the stream's tokens arrive in chunks of
    round / step tokens, one gap a chunk, each that many steps long. Time is kept: gaps x counts is unchanged."""
    if per_stream_s <= 0:
        return list(tr.step_durations), [float(w) for w in steady]
    gaps: list[float] = []
    counts: list[float] = []
    for d, w, n in zip(tr.step_durations, steady, tr.step_tokens, strict=True):
        m = max(1.0, n * per_stream_s / d) if d > 0 else 1.0
        gaps.append(d * m)
        counts.append(w / m)
    return gaps, counts


def itl_stats(tr: Trace, hidden: int, percentiles: list[float], spread: float = 0.0,
              per_stream_s: float = 0.0) -> dict[str, float]:
    """ITL of the step log, with `hidden` of the per-step gaps turned into the zero gaps of a burst, the gaps of a
    step whose streams outran the API server merged into chunks (chunk_gaps), and each gap spread by the
    calibrated log-normal factor (the client sees tokens unevenly; their mean gap is the engine's)."""
    steady = tr.steady_gaps
    total = sum(steady)
    if hidden and total:
        keep = max(0.0, 1.0 - hidden / total)
        steady = [round(w * keep) for w in steady]
    durations, counts = chunk_gaps(tr, steady, per_stream_s)
    factors = spread_factors(spread)
    if len(factors) > 1:  # merge gaps of the same length (to the microsecond) before expanding each
        merged: dict[float, float] = {}
        for d, w in zip(durations, counts, strict=True):
            if w:
                key = round(d, 6)
                merged[key] = merged.get(key, 0.0) + w
        durations, counts = list(merged), list(merged.values())
    values = [d * f for d in durations for f in factors]
    weights = [w for w in counts for _ in factors]
    extra = [g * f for g in tr.odd_gaps for f in factors]
    return _weighted_stats([*values, 0.0], [*weights, float(min(hidden, total) * len(factors))], extra, percentiles)


def _peaks(tr: Trace, ok: list[int]) -> tuple[float, int]:
    tokens: dict[int, int] = {}
    for end, k in zip(tr.step_ends, tr.step_tokens, strict=True):
        if k:
            tokens[int(end)] = tokens.get(int(end), 0) + k
    active: dict[int, int] = {}
    for r in ok:
        for second in range(int(tr.send[r]), int(tr.last[r]) + 1):
            active[second] = active.get(second, 0) + 1
    return float(max(tokens.values(), default=0)), max(active.values(), default=0)


def summarize(tr: Trace, load: Load, cfg: EngineConfig, model: StepModel, *, percentiles: list[float],
              slo_ms: dict[str, float] | None = None, label: str | None = None,
              model_id: str = "simulated") -> dict[str, Any]:
    """The aggregate block of a run, computed from the simulated per-request times."""
    slo = check_goodput(slo_ms or {})
    ok = [r for r in range(len(tr.send)) if not math.isnan(tr.last[r])]
    outs = [load.lens[r][1] for r in ok]
    # What the client sees: nothing before the stream starts, then everything made so far at once.
    opens = [tr.send[r] + model.stream_start_s for r in ok]
    first = [max(tr.first[r], o) for r, o in zip(ok, opens, strict=True)]
    last = [max(tr.last[r], o) for r, o in zip(ok, opens, strict=True)]
    ttft = [f - tr.send[r] for r, f in zip(ok, first, strict=True)]
    e2el = [e - tr.send[r] for r, e in zip(ok, last, strict=True)]
    # Each request's decode time spread by the calibrated log-normal factor (mean kept): TPOT and E2EL are taken
    # over every request at each of the factor's quantiles; duration and throughput stay the simulated ones.
    factors = spread_factors(model.tpot_spread)
    tpot = [(e - f) / (o - 1) * k for e, f, o in zip(e2el, ttft, outs, strict=True) if o > 1 for k in factors]
    e2el_spread = [f + (e - f) * k for e, f in zip(e2el, ttft, strict=True) for k in factors]
    hidden = 0  # inter-token gaps that collapse to zero because their tokens waited for the stream to start
    for r, o, n_out in zip(ok, opens, outs, strict=True):
        if n_out > 1 and tr.first[r] < o:
            span = tr.last[r] - tr.first[r]
            hidden += n_out - 1 if span <= 0 else min(n_out - 1, int((o - tr.first[r]) / (span / (n_out - 1))))
    duration = max(last, default=0.0)
    total_in = sum(load.lens[r][0] for r in ok)
    total_out = sum(outs)
    good = None
    if slo:
        good = 0.0
        for f, e, o in zip(ttft, e2el, outs, strict=True):
            for k in factors:  # a request counts as the share of its spread decode times that meet every target
                values = {"ttft": f, "tpot": (e - f) * k / (o - 1) if o > 1 else 0.0, "e2el": f + (e - f) * k}
                good += all(values[key] * MS <= v for key, v in slo.items()) / len(factors)
    peak_tokens, peak_active = _peaks(tr, ok)
    dur = duration if duration > 0 else math.nan
    out: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y%m%d-%H%M%S"), "backend": "simulated", "endpoint_type": "simulated",
        "label": label, "model_id": model_id, "tokenizer_id": model_id, "num_prompts": len(tr.send),
        "request_rate": load.request_rate, "burstiness": load.burstiness,
        "max_concurrency": load.max_concurrency if load.offsets is not None else load.concurrency,
        "duration": duration, "completed": len(ok), "failed": len(tr.send) - len(ok),
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur if duration > 0 else 0.0,
        "request_goodput": (good / dur if duration > 0 else 0.0) if good is not None else None,
        "output_throughput": total_out / dur if duration > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / dur if duration > 0 else 0.0,
        "max_output_tokens_per_s": peak_tokens, "max_concurrent_requests": peak_active,
    }
    series = {"ttft": describe(ttft, percentiles), "tpot": describe(tpot, percentiles),
              "itl": itl_stats(tr, hidden, percentiles, model.itl_spread, model.stream_per_seq_s),
              "e2el": describe(e2el_spread, percentiles)}
    for name, stats in series.items():
        for stat, value in stats.items():
            out[f"{stat}_{name}_ms"] = value
    out["simulated"] = True
    out["simulation"] = {
        "engine": cfg.model_dump(), "step_model": model.model_dump(), "steps": tr.steps,
        "busy_s": tr.busy_s, "preemptions": tr.total_preemptions,
        "requests_preempted": sum(1 for p in tr.preemptions if p),
        "max_waiting": max((p["waiting"] for p in tr.timeline), default=0.0),
        "max_kv_cache_usage": max((p["kv_cache_usage"] for p in tr.timeline), default=0.0),
        "timeline": _thin(tr.timeline),
    }
    if slo:
        out["slo_ms"] = dict(slo)
    return out


def _thin(points: list[dict[str, float]]) -> list[dict[str, float]]:
    if len(points) <= MAX_TIMELINE_POINTS:
        return points
    stride = math.ceil(len(points) / MAX_TIMELINE_POINTS)
    return points[::stride]


__all__ = ["load_from_request", "percentile", "summarize"]
