"""Per-request records and the aggregate metrics, defined and named as `vllm bench serve` does.

Definitions (vllm-facts.md §5.4, checked against vLLM 0.32 `calculate_metrics`):
- TTFT: send -> first streamed event that carries choices, per successful request.
- TPOT: (latency - TTFT) / (output_len - 1), only for requests with more than one output token.
- ITL: every gap between consecutive streamed events, pooled over all requests.
- E2EL: send -> last streamed token event.
- Goodput: successful requests meeting every given SLO (TPOT counted as 0 for one-token outputs),
  divided by the benchmark duration. Only ttft, tpot and e2el may carry an SLO.
All latencies are reported in milliseconds; statistics are mean, median, population std and
linearly interpolated percentiles (numpy's default method).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from vllm_tune.tools.errors import BadInputError

GOODPUT_KEYS = ("ttft", "tpot", "e2el")
METRIC_NAMES = ("ttft", "tpot", "itl", "e2el")
MS = 1000.0


@dataclass(slots=True)
class RequestRecord:
    """What one request did, in perf_counter seconds (one clock shared by every process on the host)."""

    index: int
    intended_send: float  # when the schedule wanted it sent (absolute perf_counter seconds)
    start_time: float = 0.0  # when it was actually sent
    success: bool = False
    error: str = ""
    prompt_len: int = 0
    output_len: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    usage_reported: bool = False
    chunks: int = 0
    text: str = ""  # kept only when the server sent no usage, to count tokens with /tokenize afterwards

    @property
    def schedule_lag(self) -> float:
        return self.start_time - self.intended_send

    def to_tuple(self) -> tuple[Any, ...]:
        """A compact picklable form for sending records between processes."""
        return (self.index, self.intended_send, self.start_time, self.success, self.error, self.prompt_len,
                self.output_len, self.ttft, self.latency, self.itl, self.usage_reported, self.chunks, self.text)

    @classmethod
    def from_tuple(cls, t: tuple[Any, ...]) -> RequestRecord:
        return cls(*t)


def percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); 0 for no values like vLLM."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def describe(values: list[float], percentiles: list[float], scale: float = MS) -> dict[str, float]:
    """mean/median/std and pNN of `values` (seconds) in milliseconds."""
    data = sorted(v * scale for v in values)
    n = len(data)
    mean = sum(data) / n if n else 0.0
    std = math.sqrt(sum((v - mean) ** 2 for v in data) / n) if n else 0.0
    out = {"mean": mean, "median": percentile(data, 50.0), "std": std}
    for p in percentiles:
        out[percentile_label(p)] = percentile(data, p)
    return out


def percentile_label(p: float) -> str:
    """'p99' for 99, 'p99.9' for 99.9 (vLLM prints whole percentiles as integers)."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p}"


def check_goodput(slo_ms: dict[str, float]) -> dict[str, float]:
    for key, value in slo_ms.items():
        if key not in GOODPUT_KEYS:
            raise BadInputError(f"SLO key {key!r} is not supported; goodput takes only ttft, tpot and e2el "
                                "(milliseconds), like vllm bench serve")
        if not value > 0:
            raise BadInputError(f"SLO {key}={value} must be a positive number of milliseconds")
    return dict(slo_ms)


def request_tpot(r: RequestRecord) -> float | None:
    if r.output_len > 1:
        return (r.latency - r.ttft) / (r.output_len - 1)
    return None


def meets_slo(r: RequestRecord, slo_ms: dict[str, float]) -> bool:
    values = {"ttft": r.ttft, "tpot": request_tpot(r) or 0.0, "e2el": r.latency}
    return all(values[k] * MS <= limit for k, limit in slo_ms.items())


def _peaks(ok: list[RequestRecord]) -> tuple[float, int]:
    """Peak output events in any 1-second bucket, and peak requests active in any 1-second bucket."""
    if not ok:
        return 0.0, 0
    t0 = min(r.start_time for r in ok)
    end = max(r.start_time + r.latency for r in ok)
    buckets = math.ceil(end - t0) + 1
    tokens = [0] * buckets
    active = [0] * buckets
    for r in ok:
        t = r.start_time + r.ttft
        tokens[min(int(t - t0), buckets - 1)] += 1
        for gap in r.itl:
            t += gap
            tokens[min(int(t - t0), buckets - 1)] += 1
        for second in range(int(r.start_time - t0), int(r.start_time + r.latency - t0) + 1):
            active[second] += 1
    return float(max(tokens)), max(active)


def compute_metrics(records: list[RequestRecord], duration: float, *, percentiles: list[float],
                    slo_ms: dict[str, float] | None = None,
                    metrics: tuple[str, ...] = METRIC_NAMES) -> dict[str, Any]:
    """The aggregate block of a `vllm bench serve --save-result` JSON, same keys and units."""
    ok = [r for r in records if r.success]
    total_input = sum(r.prompt_len for r in ok)
    total_output = sum(r.output_len for r in ok)
    dur = duration if duration > 0 else float("nan")
    good = sum(1 for r in ok if meets_slo(r, slo_ms)) if slo_ms else None
    peak_tokens, peak_active = _peaks(ok)
    out: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / dur if duration > 0 else 0.0,
        "request_goodput": (good / dur if duration > 0 else 0.0) if good is not None else None,
        "output_throughput": total_output / dur if duration > 0 else 0.0,
        "total_token_throughput": (total_input + total_output) / dur if duration > 0 else 0.0,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_active,
        "rtfx": 0.0,  # audio real-time factor in vLLM; always 0 for text
    }
    series: dict[str, list[float]] = {
        "ttft": [r.ttft for r in ok],
        "tpot": [t for r in ok if (t := request_tpot(r)) is not None],
        "itl": [g for r in ok for g in r.itl],
        "e2el": [r.latency for r in ok],
    }
    for name in metrics:
        stats = describe(series[name], percentiles)
        for stat, value in stats.items():
            out[f"{stat}_{name}_ms"] = value
    # Per-request arrays vLLM keeps even without --save-detailed (seconds, successful requests only).
    out["latencies"] = [r.latency for r in ok]
    out["queue_times"] = [max(0.0, r.start_time - r.intended_send) for r in ok]
    return out
