"""The starter alert thresholds of observability.starter-alert-thresholds as data.

The numbers are the entry's own (an attributed claim from the vllm-observability skill); `quote` holds the words
of the entry's statement that state each one, and a unit test checks that the statement still says them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from vllm_tune.tools.alerts.promql import PromQL

ENTRY_ID = "observability.starter-alert-thresholds"
_TTFT, _ITL = "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"
_QUEUE, _KV = "vllm:request_queue_time_seconds", "vllm:kv_cache_usage_perc"
_SUCCESS = "vllm:request_success_total"


@dataclass(frozen=True)
class Threshold:
    alert: str
    what: str  # summary, before the labels
    metric: str  # the series it reads (its metric entry is cited next to the starter entry)
    expr: Callable[[PromQL], str]
    op: str
    value: float
    severity: Literal["info", "warning", "critical"]
    quote: str
    for_duration: str | None = None


def _abort_share(p: PromQL) -> str:
    aborted = p.rate(_SUCCESS, 'finished_reason="abort"')
    return f"({aborted} / {p.rate(_SUCCESS)})"


def _prefix_week_drop(p: PromQL) -> str:
    # Week over week compares hour-long rates: a 5-minute window a week ago says little about the prompt mix.
    def hit_rate(offset: str) -> str:
        hits = p.agg("sum", f"rate({p.sel('vllm:prefix_cache_hits_total')}[1h]{offset})")
        queries = p.agg("sum", f"rate({p.sel('vllm:prefix_cache_queries_total')}[1h]{offset})")
        return f"({hits} / {queries})"
    return f"(1 - {hit_rate('')} / {hit_rate(' offset 1w')})"


THRESHOLDS: tuple[Threshold, ...] = (
    Threshold("VllmTtftP99High", "P99 time to first token above 3 s", _TTFT,
              lambda p: p.quantile(0.99, _TTFT), ">", 3.0, "critical",
              "page when P99 TTFT exceeds 3 s for interactive traffic"),
    Threshold("VllmItlP99High", "P99 inter-token latency above 200 ms", _ITL,
              lambda p: p.quantile(0.99, _ITL), ">", 0.2, "critical", "P99 ITL exceeds 200 ms"),
    Threshold("VllmItlP99Elevated", "P99 inter-token latency above 80 ms", _ITL,
              lambda p: p.quantile(0.99, _ITL), ">", 0.08, "warning", "(warn at 80 ms)"),
    Threshold("VllmQueueTimeP99High", "P99 queue time above 2 s", _QUEUE,
              lambda p: p.quantile(0.99, _QUEUE), ">", 2.0, "warning", "warn when queue-time P99 passes 2 s"),
    Threshold("VllmQueueTimeP99Critical", "P99 queue time above 5 s for 10 minutes", _QUEUE,
              lambda p: p.quantile(0.99, _QUEUE), ">", 5.0, "critical", "page past 5 s for 10 minutes", "10m"),
    Threshold("VllmKvCacheUsageHigh", "KV-cache usage above 0.80", _KV,
              lambda p: p.agg("max", p.sel(_KV)), ">", 0.80, "warning", "warn at KV usage above 0.80"),
    Threshold("VllmKvCacheUsageCritical", "KV-cache usage above 0.95 for 15 minutes", _KV,
              lambda p: p.agg("max", p.sel(_KV)), ">", 0.95, "critical", "page above 0.95 for 15 minutes", "15m"),
    Threshold("VllmPreemptionsSustained", "requests keep being preempted", "vllm:num_preemptions_total",
              lambda p: p.rate("vllm:num_preemptions_total"), ">", 0.0, "warning",
              "warn on any sustained preemption rate"),
    Threshold("VllmAbortShareHigh", "more than 1% of requests aborted", _SUCCESS, _abort_share, ">", 0.01,
              "warning", "abort share (warn 1%, page 10%)"),
    Threshold("VllmAbortShareCritical", "more than 10% of requests aborted", _SUCCESS, _abort_share, ">", 0.10,
              "critical", "abort share (warn 1%, page 10%)"),
    Threshold("VllmCorruptedRequests", "requests with NaN logits", "vllm:corrupted_requests_total",
              lambda p: p.increase("vllm:corrupted_requests_total"), ">", 0.0, "critical",
              "any corrupted request"),
    Threshold("VllmPrefixHitRateWeekDrop", "prefix-cache hit rate more than 20% below last week",
              "vllm:prefix_cache_hits_total", _prefix_week_drop, ">", 0.20, "warning",
              "a week-over-week prefix-hit drop over 20%"),
)

# In the entry but not a vLLM series: left to the DCGM exporter's own rules.
NOT_VLLM = (("VllmGpuXidError", "any DCGM XID error", "DCGM exporter series (DCGM_FI_DEV_XID_ERRORS), not vLLM's"),)
