"""The likely "why" behind a change: what vLLM's /metrics said in each run's measured window.

Both of our result files carry a `server` block (queue, running, KV usage, preemptions, server-side
TTFT and queue time). A change in those numbers points at a cause the client cannot see: longer
queueing means the candidate ran closer to saturation; more preemptions mean KV pressure; a larger
client-minus-server TTFT gap means network, HTTP or client overhead rather than the engine.
"""

from __future__ import annotations

from typing import Any

from vllm_tune.tools.compare.models import ServerDiff, ServerExplanation

FIELDS = ("mean_running", "max_running", "mean_waiting", "max_waiting", "mean_kv_cache_usage", "max_kv_cache_usage",
          "preemptions", "prefix_cache_hit_rate", "server_mean_ttft_ms", "server_p50_ttft_ms", "server_p99_ttft_ms",
          "server_mean_queue_time_ms", "server_p99_queue_time_ms", "server_mean_e2e_ms", "server_mean_itl_ms",
          "client_minus_server_mean_ttft_ms")


def _num(block: dict[str, Any], key: str) -> float | None:
    value = block.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _rose(a: float | None, b: float | None, *, rel: float, floor: float) -> bool | None:
    """True when b is materially above a, False when materially below, None when neither (or unknown)."""
    if a is None or b is None:
        return None
    gap = b - a
    if abs(gap) < floor or abs(gap) < rel * abs(a):
        return None
    return gap > 0


def _findings(block: dict[str, Any]) -> set[str]:
    diagnosis = block.get("diagnosis")
    if not isinstance(diagnosis, dict):
        return set()
    return {str(f["id"]) for f in diagnosis.get("findings") or [] if isinstance(f, dict) and f.get("id")}


def server_differences(base: dict[str, Any], cand: dict[str, Any]) -> tuple[list[ServerDiff], list[ServerExplanation]]:
    rows: list[ServerDiff] = []
    for key in FIELDS:
        a, b = _num(base, key), _num(cand, key)
        if a is None and b is None:
            continue
        rows.append(ServerDiff(field=key, baseline=a, candidate=b, delta=(b - a) if a is not None and b is not None
                               else None))
    why: list[ServerExplanation] = []

    def word(up: bool) -> str:
        return "rose" if up else "fell"

    queue = _rose(_num(base, "server_mean_queue_time_ms"), _num(cand, "server_mean_queue_time_ms"), rel=0.2, floor=1.0)
    waiting = _rose(_num(base, "mean_waiting"), _num(cand, "mean_waiting"), rel=0.2, floor=0.5)
    if queue is not None or waiting is not None:
        up = bool(queue if queue is not None else waiting)
        why.append(ServerExplanation(
            hint=f"time spent waiting in vLLM's queue {word(up)}: the candidate ran "
                 f"{'closer to' if up else 'further from'} saturation, which moves TTFT first",
            knowledge_ids=["triage.ttft-high-queue-growing"]))
    ttft = _rose(_num(base, "server_mean_ttft_ms"), _num(cand, "server_mean_ttft_ms"), rel=0.2, floor=1.0)
    if ttft is not None and queue is None:
        why.append(ServerExplanation(
            hint=f"server-side TTFT {word(ttft)} while queue time did not: prefill itself got "
                 f"{'slower' if ttft else 'faster'}",
            knowledge_ids=["triage.ttft-high-queue-empty"]))
    pre_a, pre_b = _num(base, "preemptions"), _num(cand, "preemptions")
    if pre_a is not None and pre_b is not None and pre_a != pre_b and max(pre_a, pre_b) > 0:
        why.append(ServerExplanation(
            hint=f"preemptions {word(pre_b > pre_a)} ({pre_a:g} -> {pre_b:g}): KV cache pressure changed, and each "
                 "preemption recomputes or swaps a request",
            knowledge_ids=["triage.preemption-kv-thrash"]))
    kv_a, kv_b = _num(base, "max_kv_cache_usage"), _num(cand, "max_kv_cache_usage")
    if kv_a is not None and kv_b is not None and (kv_a >= 0.9) != (kv_b >= 0.9):
        why.append(ServerExplanation(
            hint=f"peak KV cache usage {kv_a:.0%} -> {kv_b:.0%}: one run filled the cache, the other did not",
            knowledge_ids=["triage.kv-cache-near-full"]))
    hit_a, hit_b = _num(base, "prefix_cache_hit_rate"), _num(cand, "prefix_cache_hit_rate")
    if hit_a is not None and hit_b is not None and abs(hit_b - hit_a) >= 0.1:
        why.append(ServerExplanation(
            hint=f"prefix cache hit rate {hit_a:.0%} -> {hit_b:.0%}: cached prefill changes TTFT directly",
            knowledge_ids=["triage.prefix-cache-hit-cliff"]))
    itl = _rose(_num(base, "server_mean_itl_ms"), _num(cand, "server_mean_itl_ms"), rel=0.1, floor=0.2)
    if itl is not None:
        why.append(ServerExplanation(
            hint=f"server-side inter-token latency {word(itl)}: each decode step got {'slower' if itl else 'faster'}",
            knowledge_ids=["triage.tpot-high-decode-bound"]))
    gap = _rose(_num(base, "client_minus_server_mean_ttft_ms"), _num(cand, "client_minus_server_mean_ttft_ms"),
                rel=0.5, floor=2.0)
    if gap is not None:
        hint = (f"the gap between client and server TTFT {word(gap)}: network, HTTP or client overhead changed, "
                "not the engine")
        ids = ["benchmarking.server-vs-client-latency"]
        cand_waiting = _num(cand, "mean_waiting")
        if gap and cand_waiting is not None and cand_waiting < 0.5:
            # A backlog that no server metric shows: requests held by a CPU-starved API server before vLLM
            # stamps their arrival.
            hint += ("; vLLM's waiting queue stayed empty, so also check that the API server had CPU to take "
                     "requests in")
            ids.append("benchmarking.starved-api-server")
        why.append(ServerExplanation(hint=hint, knowledge_ids=ids))
    fa, fb = _findings(base), _findings(cand)
    if fb - fa:
        ids = sorted(fb - fa)
        why.append(ServerExplanation(hint=f"diagnose_metrics found {', '.join(ids)} only in the candidate's window",
                                     knowledge_ids=ids))
    if fa - fb:
        ids = sorted(fa - fb)
        why.append(ServerExplanation(hint=f"diagnose_metrics found {', '.join(ids)} only in the baseline's window",
                                     knowledge_ids=ids))
    return rows, why
