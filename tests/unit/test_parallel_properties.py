"""Property tests over the catalog x GPUs x GPU counts: every candidate is valid, fits, and adds up."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest import approx

from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.models import catalog_model_ids, get_gpu, gpu_names
from vllm_tune.tools.parallel import PlanInput, recommend_parallelism
from vllm_tune.tools.parallel.engine import default_max_num_seqs
from vllm_tune.tools.parallel.rules import structural_violations

MODELS = catalog_model_ids()
GPUS = gpu_names()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS), count=st.sampled_from([1, 2, 3, 4, 6, 8, 16, 32, 64]),
       goal=st.sampled_from(["latency", "throughput", "balanced"]), kv=st.sampled_from(["auto", "fp8"]))
def test_candidates_never_break_a_rule(model: str, gpu: str, count: int, goal: str, kv: str) -> None:
    kb = load_knowledge()
    out = recommend_parallelism(PlanInput(model=model, gpu=gpu, gpus=count, goal=goal, kv_cache_dtype=kv,  # type: ignore[arg-type]
                                          top=50))
    domain = 72 if out.hardware.name == "GB200" else out.gpus_per_node
    assert out.feasible == bool(out.candidates)
    if not out.feasible:
        assert out.what_would_fit
    for cand in out.candidates:
        assert structural_violations(out.model, cand, nvlink_domain=domain) == []
        tp, pp, dp = cand.tensor_parallel_size, cand.pipeline_parallel_size, cand.data_parallel_size
        assert tp * pp * dp * cand.replicas == cand.gpus_used <= count
        assert cand.enable_expert_parallel == (cand.expert_parallel_size > 1)
        if cand.enable_expert_parallel:
            assert out.model.moe is not None and cand.expert_parallel_size == tp * dp
        mem = cand.memory
        assert mem.kv_cache_gib > 0 and mem.max_concurrency_at_max_len >= 1
        assert mem.weights_gib + mem.activation_gib + mem.overhead_gib + mem.kv_cache_gib == approx(mem.usable_gib)
        assert mem.kv_tokens_per_replica >= out.workload["max_model_len"]  # type: ignore[operator]
        assert f"--max-model-len {out.workload['max_model_len']}" in cand.command
        assert all(c.id in kb for c in (*cand.reasons, *cand.warnings))
        if cand.estimate is not None:
            assert cand.estimate.ttft_ms > 0 and cand.estimate.tpot_ms > 0
            cap = default_max_num_seqs(get_gpu(gpu))
            assert cand.estimate.concurrency_per_replica <= max(cap, 64)
    assert all(r.rule in kb for r in out.rejected)
    ranks = [c.rank for c in out.candidates]
    assert ranks == list(range(1, len(ranks) + 1))
    scores = [c.score for c in out.candidates]
    assert scores == sorted(scores, reverse=True)
