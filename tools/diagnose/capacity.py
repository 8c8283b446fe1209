"""How close the server runs to its limits: KV cache, preemptions, queue, batch size and token budget."""

from __future__ import annotations

import math
from typing import Any

from vllm_tune.tools.diagnose.logs import LogFacts
from vllm_tune.tools.diagnose.models import Capacity, EngineLoad, ServeFlags
from vllm_tune.tools.diagnose.quantiles import histogram_quantile
from vllm_tune.tools.diagnose.window import Window


def _int_label(cfg: dict[str, str], key: str) -> int | None:
    raw = cfg.get(key)
    try:
        return int(float(raw)) if raw not in (None, "None", "") else None
    except ValueError:
        return None


def _float_label(cfg: dict[str, str], key: str) -> float | None:
    raw = cfg.get(key)
    try:
        return float(raw) if raw not in (None, "None", "") else None
    except ValueError:
        return None


def effective_flags(given: ServeFlags, log: LogFacts | None, models_max_len: int | None) -> tuple[ServeFlags, str]:
    """The operator's flags, completed from the log's non-default args; returns (flags, where max_num_seqs is from)."""
    args: dict[str, Any] = log.serve_args if log is not None else {}
    merged = given.model_copy()
    source = "operator" if given.max_num_seqs is not None else ""
    for field in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "tensor_parallel_size",
                  "max_cudagraph_capture_size"):
        if getattr(merged, field) is None and isinstance(args.get(field), int):
            setattr(merged, field, int(args[field]))
            if field == "max_num_seqs":
                source = "server log (non-default args)"
    if merged.enforce_eager is None and isinstance(args.get("enforce_eager"), bool):
        merged.enforce_eager = bool(args["enforce_eager"])
    if merged.max_model_len is None and models_max_len:
        merged.max_model_len = models_max_len
    if merged.tensor_parallel_size is None and log is not None and log.tensor_parallel_size:
        merged.tensor_parallel_size = log.tensor_parallel_size
    if merged.max_cudagraph_capture_size is None and log is not None:
        if log.max_capture_size is not None:
            merged.max_cudagraph_capture_size = log.max_capture_size
        elif log.capture_sizes is not None:
            merged.max_cudagraph_capture_size = max(log.capture_sizes, default=0)
    return merged, source


def _cache_config(window: Window, cap: Capacity) -> None:
    for cfg in window.after.cache_config.values():
        cap.block_size = cap.block_size or _int_label(cfg, "block_size")
        cap.num_gpu_blocks = cap.num_gpu_blocks or _int_label(cfg, "num_gpu_blocks")
        cap.kv_cache_size_tokens = cap.kv_cache_size_tokens or _int_label(cfg, "kv_cache_size_tokens")
        cap.kv_cache_max_concurrency = cap.kv_cache_max_concurrency or _float_label(cfg, "kv_cache_max_concurrency")
        if "enable_prefix_caching" in cfg and cap.prefix_caching_enabled is None:
            cap.prefix_caching_enabled = cfg["enable_prefix_caching"] == "True"
    if cap.kv_cache_size_tokens is None and cap.block_size and cap.num_gpu_blocks:
        cap.kv_cache_size_tokens = cap.block_size * cap.num_gpu_blocks


def _engines(window: Window) -> list[EngineLoad]:
    running = window.gauge_now_per_identity("num_requests_running")
    waiting = window.gauge_now_per_identity("num_requests_waiting")
    kv = window.gauge_now_per_identity("kv_cache_usage_perc")
    e2e = window.histogram_per_identity("e2e_request_latency_seconds")
    out: list[EngineLoad] = []
    for ident in sorted(set(running) | set(waiting) | set(kv)):
        hist = e2e.get(ident)
        out.append(EngineLoad(labels=dict(ident), running_now=running.get(ident), waiting_now=waiting.get(ident),
                              kv_usage_now=kv.get(ident), finished_requests=hist.count if hist else None))
    return out


def capacity_from_window(window: Window, flags: ServeFlags, finished: int | None) -> Capacity:
    cap = Capacity(max_num_seqs=flags.max_num_seqs, max_num_batched_tokens=flags.max_num_batched_tokens,
                   max_model_len=flags.max_model_len, gauge_samples=window.n_samples)
    _cache_config(window, cap)
    kv = window.gauge_series("kv_cache_usage_perc")
    if kv is not None:
        cap.kv_usage_now = kv.per_engine_max[-1]
        cap.kv_usage_max = max(kv.per_engine_max)
        cap.kv_usage_mean = sum(kv.per_engine_max) / len(kv.per_engine_max)
    running = window.gauge_series("num_requests_running")
    waiting = window.gauge_series("num_requests_waiting")
    if running is not None:
        cap.running_max = running.max
    if waiting is not None:
        cap.waiting_max = waiting.max
        if window.before is not None and window.rates_known:
            slope = waiting.slope_per_s() if window.samples else None
            if slope is None and window.seconds:
                slope = (waiting.totals[-1] - waiting.totals[0]) / window.seconds
            cap.queue_growth_per_s = slope
    deferred = window.gauge_series("num_requests_waiting_by_reason", {"reason": "deferred"})
    if deferred is not None:
        cap.waiting_deferred_mean = deferred.mean
    preemptions = window.counter("num_preemptions")
    if preemptions is not None:
        cap.preemptions = preemptions
        cap.preemptions_per_s = window.rate("num_preemptions")
        if finished is not None:
            cap.preemptions_per_request = preemptions / max(finished, 1) if (finished or preemptions) else 0.0
    steps = window.histogram("iteration_tokens_total")
    if steps is not None and steps.total > 0:
        p50, p90 = histogram_quantile(0.5, steps), histogram_quantile(0.9, steps)
        cap.iteration_tokens_p50 = None if math.isnan(p50.value) else p50.value
        cap.iteration_tokens_p90 = None if math.isnan(p90.value) else p90.value
        last = 0.0
        for bound, cum, prev in zip(steps.bounds, steps.cumulative, [0.0, *steps.cumulative[:-1]], strict=True):
            if cum > prev:
                last = bound
        cap.iteration_tokens_max_bucket = last
    cap.engines = _engines(window)
    return cap


def capacity_from_log(log: LogFacts, flags: ServeFlags) -> Capacity:
    cap = Capacity(max_num_seqs=flags.max_num_seqs, max_num_batched_tokens=flags.max_num_batched_tokens,
                   max_model_len=flags.max_model_len, kv_cache_size_tokens=log.kv_cache_tokens,
                   kv_cache_max_concurrency=log.max_concurrency, prefix_caching_enabled=log.prefix_caching)
    usages = [s.kv_usage for s in log.stats if s.kv_usage is not None]
    if usages:
        cap.kv_usage_now, cap.kv_usage_max, cap.kv_usage_mean = usages[-1], max(usages), sum(usages) / len(usages)
    if log.stats:
        cap.running_max = max(s.running for s in log.stats)
        cap.waiting_max = max(s.waiting for s in log.stats)
        cap.preemptions = float(sum(s.preemptions for s in log.stats))
        cap.gauge_samples = len(log.stats)
    return cap


def merge_log_into(cap: Capacity, log: LogFacts) -> None:
    """Fill gaps in a metrics-based capacity view from the log (never override measured values)."""
    cap.kv_cache_size_tokens = cap.kv_cache_size_tokens or log.kv_cache_tokens
    cap.kv_cache_max_concurrency = cap.kv_cache_max_concurrency or log.max_concurrency
    if cap.prefix_caching_enabled is None:
        cap.prefix_caching_enabled = log.prefix_caching
