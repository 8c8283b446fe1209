"""Named derived quantities that triage rules reference (knowledge/entries/triage.yaml `signals`).

A signal that cannot be computed from what was read is absent (never 0 or a guess), so a rule that needs it
abstains. Each value carries a short note saying where it comes from.

Targets: when the caller gives no SLO, latency ratios use DEFAULT_TARGETS_MS, the starter alert thresholds the
vllm-observability skill suggests for interactive serving (attributed claim, see vllm-facts.md §2e); the output
says that defaults were used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vllm_tune.tools.diagnose.logs import LogFacts, stats_seconds
from vllm_tune.tools.diagnose.models import (
    Capacity,
    Latency,
    Percentile,
    ServeFlags,
    SignalValue,
    SloTargets,
    Workload,
)
from vllm_tune.tools.diagnose.quantiles import histogram_quantile
from vllm_tune.tools.diagnose.snapshot import Histogram
from vllm_tune.tools.diagnose.window import Window

DEFAULT_TARGETS_MS = SloTargets(ttft=3000.0, itl=200.0, tpot=200.0)
MIN_LATENCY_OBSERVATIONS = 3
# Below this many finished requests, rates and shares are too noisy to name a bottleneck from.
MIN_REQUESTS_FOR_DIAGNOSIS = 3

SIGNAL_DOCS: dict[str, str] = {
    "finished_requests": "requests that finished in the window",
    "window_seconds": "length of the observed window",
    "ttft_over_target": "time to first token at the SLO percentile / TTFT target",
    "itl_over_target": "inter-token latency at the SLO percentile / ITL target",
    "tpot_over_target": "time per output token at the SLO percentile / TPOT target",
    "e2el_over_target": "end-to-end latency at the SLO percentile / E2EL target",
    "decode_over_target": "the larger of TPOT and ITL over their targets (those in your SLO, else the defaults)",
    "queue_share_of_e2el": "mean queue time / mean end-to-end latency",
    "decode_share_of_e2el": "mean decode time / mean end-to-end latency",
    "itl_p99_over_p50": "tail-to-median ratio of inter-token latency",
    "queue_time_share_of_ttft": "1 - mean prefill time (finished requests) / mean TTFT (first tokens): how much "
                                "of TTFT is waiting for admission",
    "outside_engine_share_of_ttft": "1 - (mean queue time + mean prefill time of finished requests) / mean TTFT "
                                    "(first tokens): how much of TTFT passed before the scheduler queued the request "
                                    "or after its first token left the engine",
    "waiting_mean": "time-averaged requests waiting (all engines)",
    "running_mean": "time-averaged requests running (all engines)",
    "queue_growth_per_s": "slope of the waiting count over the window",
    "running_over_max_num_seqs": "mean running per engine / --max-num-seqs",
    "running_max_over_max_num_seqs": "largest running count per engine / --max-num-seqs",
    "running_max_over_capture": "largest running batch / largest captured CUDA-graph size",
    "preemptions_per_s": "preemptions per second",
    "preemptions_per_request": "preemptions per finished request",
    "kv_usage_max": "highest KV-cache usage seen (fraction)",
    "kv_usage_mean": "mean KV-cache usage over the scrapes (fraction)",
    "kv_fit_over_max_num_seqs": "requests of the observed size the KV cache holds / --max-num-seqs",
    "prefill_steps_p90": "engine steps a p90 prompt needs at the --max-num-batched-tokens budget",
    "iteration_tokens_p90_over_budget": "p90 tokens per engine step / --max-num-batched-tokens",
    "prefix_caching_enabled": "1 if prefix caching is on, 0 if off",
    "prefix_hit_rate": "prefix-cache hit rate in the window (token weighted)",
    "prefix_hit_rate_drop": "1 - window hit rate / lifetime hit rate",
    "prefix_hit_rate_lifetime": "prefix-cache hit rate over the server's lifetime (token weighted)",
    "abort_fraction": "share of finished requests that were aborted",
    "error_fraction": "share of finished requests that ended in an error",
    "http_client_error_fraction": "share of HTTP responses with a 4xx status",
    "admission_rejections_per_s": "API-server 503 admission rejections per second",
    "legacy_metric_names": "count of pre-0.12 metric names seen",
    "v0_metric_names": "count of V0-engine-only metric names seen",
    "moe_default_config_warnings": "'Using default MoE config' warnings in the log",
    "spec_decode_acceptance_rate": "accepted / drafted speculative tokens",
    "deferred_share_of_waiting": "deferred waiting requests / all waiting",
    "server_utilisation": "mean running per engine / --max-num-seqs (alias used by the client-bound rule)",
}


# The direction in which each signal indicates a problem. A rule condition that holds in this direction is
# evidence of trouble; one that holds the other way (TTFT on time, nothing queued) only tells causes apart, and
# alone never justifies reporting an abstention or a finding whose deciding latency is undecided.
PROBLEM_WHEN: dict[str, str] = {
    "ttft_over_target": "high", "itl_over_target": "high", "tpot_over_target": "high", "e2el_over_target": "high",
    "decode_over_target": "high", "itl_p99_over_p50": "high", "queue_time_share_of_ttft": "high",
    "outside_engine_share_of_ttft": "high",
    "queue_share_of_e2el": "high",
    "waiting_mean": "high", "queue_growth_per_s": "high", "running_max_over_capture": "high",
    "preemptions_per_s": "high", "preemptions_per_request": "high", "kv_usage_max": "high", "kv_usage_mean": "high",
    "kv_fit_over_max_num_seqs": "low", "prefill_steps_p90": "high", "iteration_tokens_p90_over_budget": "high",
    "prefix_caching_enabled": "low", "prefix_hit_rate_drop": "high", "abort_fraction": "high",
    "error_fraction": "high", "http_client_error_fraction": "high", "admission_rejections_per_s": "high",
    "legacy_metric_names": "high", "v0_metric_names": "high", "moe_default_config_warnings": "high",
    "deferred_share_of_waiting": "high",
}


def indicates_problem(signal: str, op: str) -> bool:
    """Whether a condition `signal op threshold` that holds is evidence of a problem."""
    direction = PROBLEM_WHEN.get(signal)
    if direction == "high":
        return op in (">", ">=")
    if direction == "low":
        return op in ("<", "<=", "==")
    return False


@dataclass
class SignalSet:
    values: dict[str, SignalValue] = field(default_factory=dict)

    def put(self, name: str, value: float | None, how: str, *,
            bounds: tuple[float, float | None] | None = None) -> None:
        """`bounds`: the value is only known to lie in (lower, upper] (upper None: unbounded)."""
        if value is None or math.isnan(value) or math.isinf(value):
            return
        if bounds is None:
            self.values[name] = SignalValue(value=round(value, 6), how=how)
        else:
            lo, hi = bounds
            self.values[name] = SignalValue(value=round(value, 6), how=how, bounded=True, lower=round(lo, 6),
                                            upper=None if hi is None else round(hi, 6))

    def get(self, name: str) -> float | None:
        sv = self.values.get(name)
        return sv.value if sv is not None else None


@dataclass
class Inputs:
    window: Window | None
    log: LogFacts | None
    workload: Workload
    latency: Latency
    capacity: Capacity
    hists: dict[str, Histogram]
    flags: ServeFlags
    targets: SloTargets
    engines: int = 1
    slo_percentile: float = 90.0
    target_sources: dict[str, str] = field(default_factory=dict)  # metric -> "your SLO" | "default"


def _ratio(p: Percentile, target: float) -> tuple[float, tuple[float, float | None] | None]:
    """The percentile over the target: a point where the bucket gives one, and the bucket's bounds whenever the
    value is not exact (an interpolated value inside a bucket is not evidence beyond that bucket)."""
    if p.kind == "exact" and p.value_ms is not None:
        return p.value_ms / target, None
    hi = None if p.upper_ms is None else p.upper_ms / target
    point = p.value_ms if p.value_ms is not None else (p.upper_ms if p.upper_ms is not None else p.lower_ms)
    return point / target, (p.lower_ms / target, hi)


def _latency_ratio(x: Inputs, key: str) -> tuple[float, tuple[float, float | None] | None, str] | None:
    dist = getattr(x.latency, key)
    target = x.targets.get(key)  # type: ignore[arg-type]
    if dist is None or target is None or dist.count < MIN_LATENCY_OBSERVATIONS:
        return None
    p = dist.at(x.slo_percentile)
    if p is None:
        return None
    value, bounds = _ratio(p, target)
    source = x.target_sources.get(key, "default")
    return value, bounds, f"{key.upper()} p{x.slo_percentile:g} {p.text} / {source} target {target:g} ms"


def _latency_signals(s: SignalSet, x: Inputs) -> None:
    ratios: dict[str, tuple[float, tuple[float, float | None] | None, str]] = {}
    for key in ("ttft", "itl", "tpot", "e2el"):
        r = _latency_ratio(x, key)
        if r is not None:
            ratios[key] = r
            s.put(f"{key}_over_target", r[0], r[2], bounds=r[1])
    decode = [k for k in ("tpot", "itl") if k in ratios]
    chosen = [k for k in decode if x.target_sources.get(k) == "your SLO"] or decode
    if chosen:
        lo = max((ratios[k][1] or (ratios[k][0], ratios[k][0]))[0] for k in chosen)
        his = [(ratios[k][1] or (ratios[k][0], ratios[k][0]))[1] for k in chosen]
        hi = None if any(h is None for h in his) else max(h for h in his if h is not None)
        worst = max(chosen, key=lambda k: ratios[k][0])
        exact = all(ratios[k][1] is None for k in chosen)
        s.put("decode_over_target", ratios[worst][0], " and ".join(ratios[k][2] for k in chosen),
              bounds=None if exact else (lo, hi))
    itl = x.hists.get("itl")
    if itl is not None and itl.total >= 20:
        p50, p99 = histogram_quantile(0.5, itl), histogram_quantile(0.99, itl)
        # A ratio of two values one of which is only a bound is no ratio at all.
        if p50.value > 0 and p50.lower > 0 and not p99.in_overflow:
            s.put("itl_p99_over_p50", p99.value / p50.value,
                  f"ITL p99 {p99.value * 1e3:.1f} ms / p50 {p50.value * 1e3:.1f} ms")
    ttft, queue, prefill = x.hists.get("ttft"), x.hists.get("queue"), x.hists.get("prefill")
    # vLLM records TTFT at a request's first token but its queue and prefill time only when it finishes, so in a
    # window they describe different requests: under a growing queue the ones that finished were admitted
    # early and barely waited, while the first tokens (the TTFT being judged) came to requests that waited
    # long. A request's prefill time hardly depends on how long it waited, so the finished requests' mean
    # prefill stands in for that of the first tokens, and the rest of their mean TTFT is the time before
    # prefill (queueing, and hand-off to the engine).
    if ttft is not None and prefill is not None and ttft.count >= MIN_LATENCY_OBSERVATIONS and \
            prefill.count >= MIN_LATENCY_OBSERVATIONS and ttft.sum > 0:
        mean_ttft, mean_prefill = ttft.sum / ttft.count, prefill.sum / prefill.count
        s.put("queue_time_share_of_ttft", max(0.0, 1.0 - mean_prefill / mean_ttft),
              f"1 - mean prefill time of finished requests ({mean_prefill * 1e3:.1f} ms) / mean TTFT of the "
              f"first tokens in the window ({mean_ttft * 1e3:.1f} ms)")
        if queue is not None and queue.count >= MIN_LATENCY_OBSERVATIONS:
            # The engine times a request from the scheduler's queue to its first token; the rest of TTFT is the
            # API server taking it in, the hop to the engine core (which adds new requests between steps) and the
            # first token's way back. Same populations as above: queue time stands for the finished requests.
            mean_queue = queue.sum / queue.count
            s.put("outside_engine_share_of_ttft", max(0.0, 1.0 - (mean_queue + mean_prefill) / mean_ttft),
                  f"1 - (mean queue {mean_queue * 1e3:.1f} ms + mean prefill {mean_prefill * 1e3:.1f} ms of finished "
                  f"requests) / mean TTFT of the first tokens in the window ({mean_ttft * 1e3:.1f} ms)")
    elif ttft is not None and queue is not None and ttft.count >= MIN_LATENCY_OBSERVATIONS and \
            queue.count >= MIN_LATENCY_OBSERVATIONS and ttft.sum > 0:
        # No prefill histogram: a ratio across the two populations, taken only when each is large enough.
        s.put("queue_time_share_of_ttft", min(1.0, (queue.sum / queue.count) / (ttft.sum / ttft.count)),
              "mean queue time of finished requests / mean TTFT of the first tokens in the window")
    e2e, decode_h = x.hists.get("e2el"), x.hists.get("decode")
    if e2e is not None and e2e.count >= MIN_LATENCY_OBSERVATIONS and e2e.sum > 0:
        mean_e2e = e2e.sum / e2e.count
        if queue is not None and queue.count > 0:
            s.put("queue_share_of_e2el", min(1.0, queue.sum / queue.count / mean_e2e),
                  "mean queue time / mean E2E latency (_sum/_count)")
        if decode_h is not None and decode_h.count > 0:
            s.put("decode_share_of_e2el", min(1.0, decode_h.sum / decode_h.count / mean_e2e),
                  "mean decode time / mean E2E latency (_sum/_count)")


def _concurrency_signals(s: SignalSet, x: Inputs) -> None:
    w, cap, flags = x.workload, x.capacity, x.flags
    how = w.concurrency_source or "gauges"
    s.put("waiting_mean", w.waiting_mean, how)
    s.put("running_mean", w.running_mean, how)
    s.put("queue_growth_per_s", cap.queue_growth_per_s, "slope of num_requests_waiting over the scrapes")
    engines = max(1, x.engines)
    if flags.max_num_seqs:
        if w.running_mean is not None:
            per = w.running_mean / engines
            s.put("running_over_max_num_seqs", per / flags.max_num_seqs,
                  f"{per:.2f} running per engine / max_num_seqs {flags.max_num_seqs}")
        if cap.running_max is not None:
            s.put("running_max_over_max_num_seqs", cap.running_max / engines / flags.max_num_seqs,
                  f"max running {cap.running_max:g} over {engines} engine(s) / max_num_seqs {flags.max_num_seqs}")
    capture = flags.max_cudagraph_capture_size
    if capture and not flags.enforce_eager and cap.running_max is not None:
        s.put("running_max_over_capture", cap.running_max / engines / capture,
              f"max running per engine / largest captured CUDA-graph size {capture}")
    if cap.waiting_deferred_mean is not None and w.waiting_mean:
        s.put("deferred_share_of_waiting", cap.waiting_deferred_mean / w.waiting_mean,
              "mean deferred waiting / mean waiting")


def _kv_full_by_preemption(s: SignalSet, sampled: float | None, preemptions: float | None, seen: str) -> None:
    """The usage gauge is a point sample; a preemption is proof that the cache filled between two samples."""
    if sampled is None or not preemptions or preemptions <= 0 or sampled >= 1.0:
        return
    # vLLM preempts a running request only when the KV blocks of another's next step cannot be allocated
    # (v1/core/sched/scheduler.py: allocate_slots returns None); scrapes a second apart miss that moment.
    s.put("kv_usage_max", 1.0, f"{preemptions:.0f} preemption(s): the cache could not hold what the running "
          f"requests needed next (vllm:kv_cache_usage_perc saw at most {sampled:.0%}, {seen})")


def _kv_signals(s: SignalSet, x: Inputs) -> None:
    cap, w, flags = x.capacity, x.workload, x.flags
    s.put("preemptions_per_s", cap.preemptions_per_s, "increase of vllm:num_preemptions over the window")
    s.put("preemptions_per_request", cap.preemptions_per_request,
          "preemptions / requests finished in the window")
    samples = f"max over {cap.gauge_samples} scrape(s)" if cap.gauge_samples else "max"
    s.put("kv_usage_max", cap.kv_usage_max, f"vllm:kv_cache_usage_perc, {samples}")
    _kv_full_by_preemption(s, cap.kv_usage_max, cap.preemptions, samples)
    s.put("kv_usage_mean", cap.kv_usage_mean, "vllm:kv_cache_usage_perc, mean over the scrapes")
    per_request = (w.prompt_tokens_mean or 0) + (w.output_tokens_mean or 0)
    if cap.kv_cache_size_tokens and per_request > 0 and flags.max_num_seqs:
        fit = cap.kv_cache_size_tokens / per_request
        s.put("kv_fit_over_max_num_seqs", fit / flags.max_num_seqs,
              f"KV cache {cap.kv_cache_size_tokens} tokens holds {fit:.1f} requests of {per_request:.0f} tokens; "
              f"max_num_seqs {flags.max_num_seqs}")


def _budget_signals(s: SignalSet, x: Inputs) -> None:
    budget, w, cap = x.flags.max_num_batched_tokens, x.workload, x.capacity
    if not budget:
        return
    if w.prompt_tokens_p90:
        s.put("prefill_steps_p90", math.ceil(w.prompt_tokens_p90 / budget),
              f"p90 prompt {w.prompt_tokens_p90:.0f} tokens / budget {budget}")
    if cap.iteration_tokens_p90 is not None:
        s.put("iteration_tokens_p90_over_budget", cap.iteration_tokens_p90 / budget,
              f"vllm:iteration_tokens_total p90 {cap.iteration_tokens_p90:.0f} / budget {budget}")


def _mix_signals(s: SignalSet, x: Inputs) -> None:
    w, cap, window = x.workload, x.capacity, x.window
    if cap.prefix_caching_enabled is not None:
        s.put("prefix_caching_enabled", 1.0 if cap.prefix_caching_enabled else 0.0, "cache_config_info / log")
    s.put("prefix_hit_rate", w.prefix_cache_hit_rate, "prefix_cache_hits / prefix_cache_queries in the window")
    if w.prefix_cache_hit_rate is not None and w.prefix_cache_hit_rate_lifetime and window is not None:
        queries = window.counter("prefix_cache_queries") or 0.0
        if queries >= 1000:
            s.put("prefix_hit_rate_drop", 1.0 - w.prefix_cache_hit_rate / w.prefix_cache_hit_rate_lifetime,
                  f"window {w.prefix_cache_hit_rate:.1%} vs lifetime {w.prefix_cache_hit_rate_lifetime:.1%}")
            s.put("prefix_hit_rate_lifetime", w.prefix_cache_hit_rate_lifetime,
                  "prefix_cache_hits / prefix_cache_queries since the server started")
    if w.finished_requests:
        s.put("abort_fraction", w.finish_reasons.get("abort", 0.0), "finished_reason=abort share")
        s.put("error_fraction", w.finish_reasons.get("error", 0.0), "finished_reason=error share")
    s.put("spec_decode_acceptance_rate", w.spec_decode_acceptance_rate, "accepted / draft tokens")
    if window is not None:
        rej = window.rate("admission_rejections")
        s.put("admission_rejections_per_s", rej, "vllm:admission_rejections_total rate")
        s.put("legacy_metric_names", float(len(window.after.legacy_names)),
              ", ".join(sorted(window.after.legacy_names)) or "none")
        s.put("v0_metric_names", float(len(window.after.v0_names)), ", ".join(sorted(window.after.v0_names)) or "none")
        _http_signal(s, window, x.log)
    elif x.log is not None:
        _http_signal(s, None, x.log)
    if x.log is not None:
        s.put("moe_default_config_warnings", float(len(x.log.moe_default_config)), "server log")
    if x.flags.max_num_seqs and w.running_mean is not None:
        s.put("server_utilisation", w.running_mean / max(1, x.engines) / x.flags.max_num_seqs,
              "mean running per engine / max_num_seqs")


def _http_signal(s: SignalSet, window: Window | None, log: LogFacts | None) -> None:
    counts: dict[str, float] = {}
    how = ""
    if window is not None and window.after.http_requests:
        before = window.before.http_requests if window.before is not None else {}
        counts = {k: v - before.get(k, 0.0) for k, v in window.after.http_requests.items()}
        how = "http_requests_total by status class in the window"
    elif log is not None and log.http_status:
        counts = {k: float(v) for k, v in log.http_status.items()}
        how = "access-log status codes"
    total = sum(v for v in counts.values() if v > 0)
    if total >= 10:
        s.put("http_client_error_fraction", max(0.0, counts.get("4xx", 0.0)) / total, how)


def _log_only_signals(s: SignalSet, log: LogFacts) -> None:
    """From the periodic stats lines when no metrics were read."""
    # Idle intervals would dilute the means: judge the intervals in which something ran or waited.
    lines = [x for x in log.stats if x.running or x.waiting] or log.stats
    if not lines:
        return
    how = f"{len(lines)} busy periodic stats line(s) in the log"
    s.put("waiting_mean", sum(x.waiting for x in lines) / len(lines), how)
    s.put("running_mean", sum(x.running for x in lines) / len(lines), how)
    usages = [x.kv_usage for x in lines if x.kv_usage is not None]
    seconds = stats_seconds(log)
    preempted = sum(x.preemptions for x in lines)
    if usages:
        s.put("kv_usage_max", max(usages), how)
        s.put("kv_usage_mean", sum(usages) / len(usages), how)
        _kv_full_by_preemption(s, max(usages), float(preempted), how)
    if seconds:
        s.put("preemptions_per_s", preempted / seconds, f"'Preemptions:' fields over {seconds:.0f} s of stats lines")
    if len(lines) >= 2:
        first, last = lines[0], lines[-1]
        if seconds and seconds > 0:
            s.put("queue_growth_per_s", (last.waiting - first.waiting) / seconds, how)
    hits = [x.prefix_hit_rate for x in lines if x.prefix_hit_rate is not None]
    if hits:
        s.put("prefix_hit_rate", hits[-1], "rolling prefix hit rate in the last stats line")


def compute_signals(x: Inputs) -> SignalSet:
    s = SignalSet()
    window = x.window
    if window is not None:
        if x.workload.finished_requests is not None:
            s.put("finished_requests", float(x.workload.finished_requests), "request_success_total increase")
        if window.seconds:
            s.put("window_seconds", window.seconds, "time between the first and last scrape")
        _latency_signals(s, x)
        _concurrency_signals(s, x)
        _kv_signals(s, x)
        _budget_signals(s, x)
    elif x.log is not None:
        _log_only_signals(s, x.log)
        _concurrency_signals(s, x)
    _mix_signals(s, x)
    return s


