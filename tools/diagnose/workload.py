"""The workload the server saw in the window: rate, lengths, concurrency, finish reasons, cache behaviour."""

from __future__ import annotations

import math

from vllm_tune.tools.diagnose.models import Workload
from vllm_tune.tools.diagnose.quantiles import histogram_quantile
from vllm_tune.tools.diagnose.snapshot import Histogram
from vllm_tune.tools.diagnose.window import Window


def _mean(hist: Histogram | None) -> float | None:
    return hist.sum / hist.count if hist is not None and hist.count > 0 else None


def _p90(hist: Histogram | None) -> float | None:
    if hist is None or hist.total <= 0:
        return None
    v = histogram_quantile(0.9, hist).value
    return None if math.isnan(v) else v


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def workload_from_window(window: Window, latency_hists: dict[str, Histogram]) -> Workload:
    w = Workload()
    reasons = window.counter_by_dim("request_success", "finished_reason")
    finished = sum(reasons.values()) if reasons else None
    if finished is None and "e2el" in latency_hists:
        finished = latency_hists["e2el"].count
    w.finished_requests = round(finished) if finished is not None else None
    if finished:
        w.finish_reasons = {k: v / finished for k, v in sorted(reasons.items()) if v > 0}
    prompt = window.histogram("request_prompt_tokens")
    output = window.histogram("request_generation_tokens")
    w.prompt_tokens_mean, w.prompt_tokens_p90 = _mean(prompt), _p90(prompt)
    w.output_tokens_mean, w.output_tokens_p90 = _mean(output), _p90(output)
    n_hist = window.histogram("request_params_n")
    w.parallel_sampling_n_mean = _mean(n_hist)

    w.prefix_cache_hit_rate = _ratio(window.counter("prefix_cache_hits"), window.counter("prefix_cache_queries"))
    if window.before is not None:
        lifetime = Window(after=window.after)
        w.prefix_cache_hit_rate_lifetime = _ratio(lifetime.counter("prefix_cache_hits"),
                                                  lifetime.counter("prefix_cache_queries"))
    drafts = window.counter("spec_decode_num_draft_tokens")
    accepted = window.counter("spec_decode_num_accepted_tokens")
    w.spec_decode_acceptance_rate = _ratio(accepted, drafts)
    n_drafts = window.counter("spec_decode_num_drafts")
    if accepted is not None and n_drafts:
        w.spec_decode_mean_acceptance_length = 1.0 + accepted / n_drafts

    if window.rates_known:
        assert window.seconds is not None
        secs = window.seconds
        if finished is not None:
            w.request_rate_per_s = finished / secs
        w.prompt_tokens_per_s = window.rate("prompt_tokens")
        w.generation_tokens_per_s = window.rate("generation_tokens")
        e2e = latency_hists.get("e2el")
        if e2e is not None and e2e.count > 0:
            w.in_system_mean = e2e.sum / secs  # Little's law: L = lambda * W = (n / T) * (sum / n)
    _concurrency(window, latency_hists, w)
    return w


def _concurrency(window: Window, hists: dict[str, Histogram], w: Workload) -> None:
    """Time-averaged running/waiting: observed gauges when the window was sampled, else Little's law."""
    running = window.gauge_series("num_requests_running")
    waiting = window.gauge_series("num_requests_waiting")
    if window.samples and len(window.samples) >= 3 and running is not None and waiting is not None:
        w.running_mean, w.waiting_mean = running.mean, waiting.mean
        w.concurrency_source = f"mean of {len(running.totals)} scrapes of the running/waiting gauges"
        return
    if window.rates_known and window.before is not None:
        assert window.seconds is not None
        queue, inference = hists.get("queue"), hists.get("inference")
        if queue is not None and inference is not None:
            w.waiting_mean = queue.sum / window.seconds
            w.running_mean = inference.sum / window.seconds
            w.concurrency_source = ("Little's law over the window: summed queue / inference time of finished "
                                    "requests divided by the window")
            return
    # Gauges read at one or two instants say nothing about the time average: leave the means unknown.
