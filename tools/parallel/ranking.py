"""Goal rules on top of the estimates, and the one-line 'why' of the first layout with its figures.

For throughput, a model that fits one GPU with room for its share of the load is served as TP1 replicas
(distributed.smallest-tp-then-replicas, measured.tp1-replicas-per-gpu) unless a larger TP is estimated to give
more tokens per GPU by more than the estimator's own p90 error: gains inside the error do not overturn what
every measured TP sweep shows.
"""

from __future__ import annotations

from vllm_tune.tools.parallel.io import Candidate

QUEUE_MARK = "requests queue"


def _tp1(c: Candidate) -> bool:
    return c.tensor_parallel_size == 1 and c.pipeline_parallel_size == 1


def _holds_load(c: Candidate) -> bool:
    return c.estimate is not None and QUEUE_MARK not in c.estimate.bottleneck


def _per_gpu(c: Candidate) -> float:
    return c.estimate.output_tokens_per_s_per_gpu if c.estimate is not None else 0.0


def order_for_goal(cands: list[Candidate], goal: str, margin: float) -> list[Candidate]:
    """Scores after the goal rule, sorted best first (ties: fewer GPUs, less PP, less TP).

    The rule yields only where the workload forces it: TP1 copies must queue requests that a larger TP holds."""
    tp1 = [c for c in cands if _tp1(c) and c.estimate is not None]
    if goal == "throughput" and tp1:
        tp1_holds = any(_holds_load(c) for c in tp1)
        cands = [c if _tp1(c) or (not tp1_holds and _holds_load(c))
                 else c.model_copy(update={"score": c.score / (1 + margin)}) for c in cands]
    return sorted(cands, key=lambda c: (-c.score, c.gpus_used, c.pipeline_parallel_size, c.tensor_parallel_size))


def why_first(ordered: list[Candidate], goal: str, margin: float) -> str | None:
    """One line with the figures: why the first layout and not the best layout of the other kind."""
    if not ordered or ordered[0].estimate is None:
        return None
    first = ordered[0]
    fe = first.estimate
    assert fe is not None
    if goal == "latency":
        other = next((c for c in ordered[1:] if c.tensor_parallel_size != first.tensor_parallel_size
                      and c.estimate is not None), None)
        if other is None or other.estimate is None:
            return f"{first.label()}: est. TPOT {fe.tpot_ms:.1f} ms, TTFT {fe.ttft_ms:.0f} ms"
        return (f"{first.label()} first for latency: est. TPOT {fe.tpot_ms:.1f} ms vs {other.estimate.tpot_ms:.1f} "
                f"ms for {other.label()}")
    if _tp1(first):
        other = next((c for c in ordered[1:] if not _tp1(c) and c.estimate is not None), None)
        if other is None:
            return f"{first.label()}: est. {_per_gpu(first):,.0f} output tok/s/GPU"
        gain = _per_gpu(other) / max(_per_gpu(first), 1e-9) - 1
        if gain > 0:
            return (f"{first.label()} first: it fits one GPU with room for its "
                    f"{fe.concurrency_per_replica:.0f} requests; {other.label()} is estimated {gain:+.0%} per GPU "
                    f"({_per_gpu(other):,.0f} vs {_per_gpu(first):,.0f} tok/s/GPU), inside the estimator's "
                    f"{margin:.0%} p90 error")
        return (f"{first.label()} first: est. {_per_gpu(first):,.0f} output tok/s/GPU vs {_per_gpu(other):,.0f} "
                f"for {other.label()} ({-gain:.0%} more per GPU)")
    tp1 = next((c for c in ordered if _tp1(c) and c.estimate is not None), None)
    if tp1 is None or tp1.estimate is None:
        per_copy = first.tensor_parallel_size * first.pipeline_parallel_size
        return (f"{first.label()} first: no TP1 layout fits ({per_copy} GPUs per copy is the smallest that does); "
                f"est. {_per_gpu(first):,.0f} output tok/s/GPU")
    te = tp1.estimate
    if not _holds_load(tp1) and _holds_load(first):
        return (f"{first.label()} first: TP1's KV cache holds {te.concurrency_per_replica:.0f} requests per replica "
                f"at this load's mean context, fewer than its share, so requests queue; est. "
                f"{_per_gpu(first):,.0f} vs {_per_gpu(tp1):,.0f} tok/s/GPU for {tp1.label()}")
    return (f"{first.label()} first: est. {_per_gpu(first):,.0f} vs {_per_gpu(tp1):,.0f} tok/s/GPU for "
            f"{tp1.label()}, more than the estimator's {margin:.0%} p90 error")
