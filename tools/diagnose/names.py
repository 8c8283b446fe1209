"""vLLM metric names across versions: one canonical name per quantity.

Canonical names are the current (v0.12+) ones without the `vllm:` prefix and without the `_total` suffix that
prometheus_client appends to counters on the wire. Renames follow vLLM's deprecate -> hide -> remove policy
(knowledge entry triage.old-metric-names cites the steps):
  gpu_cache_usage_perc          -> kv_cache_usage_perc          (deprecated 0.9.2, hidden 0.10/0.11, gone 0.12)
  gpu_prefix_cache_queries/hits -> prefix_cache_queries/hits    (same steps; block-weighted before, tokens now)
  time_per_output_token_seconds -> inter_token_latency_seconds  (deprecated 0.11, gone 0.13)
"""

from __future__ import annotations

PREFIX = "vllm:"

RENAMED: dict[str, str] = {
    "gpu_cache_usage_perc": "kv_cache_usage_perc",
    "gpu_prefix_cache_queries": "prefix_cache_queries",
    "gpu_prefix_cache_hits": "prefix_cache_hits",
    "time_per_output_token_seconds": "inter_token_latency_seconds",
}

# Series only the V0 engine exported; seeing one means a pre-V1 (or V0-mode) server.
V0_ONLY: frozenset[str] = frozenset({
    "num_requests_swapped", "cpu_cache_usage_perc", "cpu_prefix_cache_hit_rate", "gpu_prefix_cache_hit_rate",
    "time_in_queue_requests", "avg_prompt_throughput_toks_per_s", "avg_generation_throughput_toks_per_s",
    "num_requests_max", "spec_decode_draft_acceptance_rate", "spec_decode_efficiency",
})

HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")

# Labels that split one quantity into parts (kept as a dimension); every other label identifies where the
# series comes from (engine, model_name, and under Prometheus instance/pod/job...).
DIMENSION_LABELS: frozenset[str] = frozenset({
    "reason", "finished_reason", "source", "stage", "sleep_state", "position", "status", "handler", "method",
})

# Latency histograms (seconds) in the output, by the short name used in reports.
LATENCY_HISTOGRAMS: dict[str, str] = {
    "ttft": "time_to_first_token_seconds",
    "itl": "inter_token_latency_seconds",
    "tpot": "request_time_per_output_token_seconds",
    "e2el": "e2e_request_latency_seconds",
    "queue": "request_queue_time_seconds",
    "prefill": "request_prefill_time_seconds",
    "decode": "request_decode_time_seconds",
    "inference": "request_inference_time_seconds",
}

GAUGES_SAMPLED = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")


def canonical(base: str) -> tuple[str, str | None]:
    """(canonical name, old name or None) for a family name without the `vllm:` prefix."""
    new = RENAMED.get(base)
    return (new, base) if new else (base, None)


def split_sample_name(name: str) -> tuple[str, str]:
    """'vllm:x_seconds_bucket' -> ('x_seconds', '_bucket'); 'vllm:num_preemptions_total' -> ('num_preemptions',
    '_total'); a plain gauge gets ''. Only called for names that start with `vllm:`."""
    base = name[len(PREFIX):]
    for part in HISTOGRAM_PARTS:
        if base.endswith(part):
            return base[: -len(part)], part
    if base.endswith("_total") and base != "iteration_tokens_total":
        stem = base[:-6]
        # Very old builds declared counters with an explicit `_total`, which some clients doubled.
        while stem.endswith("_total"):
            stem = stem[:-6]
        return stem, "_total"
    if base.endswith("_created"):
        return base[:-8], "_created"
    return base, ""
