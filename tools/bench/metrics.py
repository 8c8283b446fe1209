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
from collections.abc import Iterable
from typing import Any

from vllm_tune.tools.bench.records import RecordLog, RequestRecord
from vllm_tune.tools.slo import SloCheck, SloMetric, goodput_slo, judge_value

GOODPUT_KEYS = ("ttft", "tpot", "e2el")
METRIC_NAMES = ("ttft", "tpot", "itl", "e2el")
MS = 1000.0


def percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); 0 for no values like vLLM."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def describe(values: Iterable[float], percentiles: list[float], scale: float = MS) -> dict[str, float]:
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
    """The SLO in its canonical form, refused with the one vocabulary's message (tools/slo.py)."""
    return goodput_slo(slo_ms)


def slo_checks(result: dict[str, Any], slo_ms: dict[str, float], pct: float) -> list[SloCheck]:
    """Each target judged at the SLO percentile of a result (exact per-request percentiles): which target, at
    which percentile, decided what. Goodput itself counts requests meeting every target, per request."""
    out = []
    for key, limit in slo_ms.items():
        got = result.get(f"{percentile_label(pct)}_{key}_ms")
        metric: SloMetric = key  # type: ignore[assignment]  # goodput_slo admits only SLO metric names
        out.append(judge_value(metric, limit, pct, float(got) if isinstance(got, int | float) else None))
    return out


def _tpot(log: RecordLog, k: int) -> float | None:
    out = log.output_len[k]
    return (log.latency[k] - log.ttft[k]) / (out - 1) if out > 1 else None


def _meets_slo(log: RecordLog, k: int, slo_ms: dict[str, float]) -> bool:
    values = {"ttft": log.ttft[k], "tpot": _tpot(log, k) or 0.0, "e2el": log.latency[k]}
    return all(values[key] * MS <= limit for key, limit in slo_ms.items())


def _peaks(log: RecordLog, ok: list[int]) -> tuple[float, int]:
    """Peak output events in any 1-second bucket, and peak requests active in any 1-second bucket."""
    if not ok:
        return 0.0, 0
    start, latency = log.start, log.latency
    t0 = min(start[k] for k in ok)
    end = max(start[k] + latency[k] for k in ok)
    buckets = math.ceil(end - t0) + 1
    tokens = [0] * buckets
    active = [0] * buckets
    for k in ok:
        t = start[k] + log.ttft[k]
        tokens[min(int(t - t0), buckets - 1)] += 1
        for gap in log.gaps(k):
            t += gap
            tokens[min(int(t - t0), buckets - 1)] += 1
        for second in range(int(start[k] - t0), int(start[k] + latency[k] - t0) + 1):
            active[second] += 1
    return float(max(tokens)), max(active)


def compute_metrics(records: RecordLog | Iterable[RequestRecord], duration: float, *, percentiles: list[float],
                    slo_ms: dict[str, float] | None = None,
                    metrics: tuple[str, ...] = METRIC_NAMES) -> dict[str, Any]:
    """The aggregate block of a `vllm bench serve --save-result` JSON, same keys and units."""
    log = records if isinstance(records, RecordLog) else RecordLog.of(records)
    ok = log.ok_rows()
    total_input = sum(log.prompt_len[k] for k in ok)
    total_output = sum(log.output_len[k] for k in ok)
    dur = duration if duration > 0 else float("nan")
    good = sum(1 for k in ok if _meets_slo(log, k, slo_ms)) if slo_ms else None
    peak_tokens, peak_active = _peaks(log, ok)
    out: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(log) - len(ok),
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
    all_ok = len(ok) == len(log)
    series: dict[str, Any] = {
        "ttft": [log.ttft[k] for k in ok],
        "tpot": [t for k in ok if (t := _tpot(log, k)) is not None],
        "itl": log.itl if all_ok else [g for k in ok for g in log.gaps(k)],
        "e2el": [log.latency[k] for k in ok],
    }
    for name in metrics:
        stats = describe(series[name], percentiles)
        for stat, value in stats.items():
            out[f"{stat}_{name}_ms"] = value
    # Per-request arrays vLLM keeps even without --save-detailed (seconds, successful requests only), plus the
    # TTFTs and token counts it keeps only with --save-detailed (same names; here successful requests only, in
    # the same order), so that runs can be compared request by request (tools/compare).
    out["latencies"] = series["e2el"]
    out["ttfts"] = series["ttft"]
    out["input_lens"] = [log.prompt_len[k] for k in ok]
    out["output_lens"] = [log.output_len[k] for k in ok]
    out["queue_times"] = [max(0.0, log.start[k] - log.intended[k]) for k in ok]
    return out
