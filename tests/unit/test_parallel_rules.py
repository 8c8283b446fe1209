"""Validity rules, the memory model and the citations of the parallelism planner."""

from __future__ import annotations

import pytest

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.models import resolve_model
from vllm_tune.tools.parallel import ALL_RULE_IDS, Layout, PlanInput, layouts_for, recommend_parallelism
from vllm_tune.tools.parallel.command import FLAG_IDS, build_command
from vllm_tune.tools.parallel.memory import kv_bytes_per_token_per_gpu, weights_per_gpu
from vllm_tune.tools.parallel.rules import structural_violations


def layout(tp: int, pp: int = 1, dp: int = 1, ep: bool = False, replicas: int = 1) -> Layout:
    return Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp, enable_expert_parallel=ep,
                  expert_parallel_size=tp * dp if ep else 1, replicas=replicas, gpus_used=tp * pp * dp * replicas)


def rules(model: str, lay: Layout, domain: int = 8) -> list[str]:
    return [v.rule for v in structural_violations(resolve_model(model), lay, nvlink_domain=domain)]


def test_every_cited_id_exists_in_the_knowledge_base() -> None:
    kb = load_knowledge()
    missing = [i for i in (*ALL_RULE_IDS, *FLAG_IDS.values(), "flag.max-model-len", "flag.max-num-seqs") if i not in kb]
    assert missing == []
    for entry_id in ALL_RULE_IDS:
        assert kb.get(entry_id).kind in ("rule", "pitfall", "hardware-note", "lever")


def test_heads_and_kv_heads_divisibility() -> None:
    assert rules("llama-3.1-8b", layout(3)) == ["pitfall.tp-not-dividing-heads", "parallelism.kv-heads-tp-divisible"]
    assert rules("llama-3.1-8b", layout(16, 1, 1), domain=16) == []  # 8 KV heads copied twice: allowed
    assert rules("phi-4", layout(4)) == ["parallelism.kv-heads-tp-divisible"]  # 40 heads / 10 KV heads
    assert rules("phi-4", layout(5)) == []


def test_ep_pp_and_node_rules() -> None:
    assert rules("llama-3.1-8b", layout(1, 1, 2, ep=True)) == ["parallelism.ep-requires-moe"]
    assert rules("mixtral-8x7b", layout(1, 1, 16, ep=True)) == ["pitfall.moe-experts-not-divisible"]
    assert rules("mixtral-8x7b", layout(1, 64), domain=8) == ["parallelism.pp-needs-layers"]
    assert rules("llama-3.1-405b", layout(16)) == ["parallelism.tp-within-node"]
    bad = Layout(tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1, enable_expert_parallel=False,
                 expert_parallel_size=1, gpus_used=3)
    assert rules("llama-3.1-8b", bad) == ["parallelism.world-size"]


def test_fp8_block_rule_counts_tp_times_dp_without_ep() -> None:
    assert rules("Qwen/Qwen3-235B-A22B-FP8", layout(4)) == []
    assert rules("Qwen/Qwen3-235B-A22B-FP8", layout(8)) == ["pitfall.fp8-block-tp-cap"]
    assert rules("Qwen/Qwen3-235B-A22B-FP8", layout(2, 1, 4)) == ["parallelism.moe-tp-spans-dp"]
    assert rules("Qwen/Qwen3-235B-A22B-FP8", layout(2, 1, 4, ep=True)) == []
    # The BF16 checkpoint has no block constraint at all.
    assert rules("Qwen/Qwen3-235B-A22B", layout(8)) == []
    # DeepSeek's dense MLP (18432) and shared expert (2048) split cleanly at TP16.
    assert rules("deepseek-v3", layout(16), domain=72) == []


def test_memory_model_shards_weights_and_kv() -> None:
    llama = resolve_model("llama-3.1-70b")
    one, eight = weights_per_gpu(llama, layout(1)), weights_per_gpu(llama, layout(8))
    assert one == pytest.approx(llama.checkpoint_bytes, rel=0.01)
    assert eight == pytest.approx(one / 8, rel=0.01)
    assert kv_bytes_per_token_per_gpu(llama, layout(8), "auto") == 80 * 2 * 1 * 128 * 2
    assert kv_bytes_per_token_per_gpu(llama, layout(16), "auto") == 80 * 2 * 1 * 128 * 2  # replicated beyond 8
    assert kv_bytes_per_token_per_gpu(llama, layout(2, 2), "fp8") == 40 * 2 * 4 * 128 * 1
    ds = resolve_model("deepseek-r1")
    # MLA: the latent is not split by TP; experts are split over TP x DP with or without EP.
    assert kv_bytes_per_token_per_gpu(ds, layout(8), "auto") == kv_bytes_per_token_per_gpu(ds, layout(1), "auto")
    assert weights_per_gpu(ds, layout(1, 1, 8, ep=True)) == pytest.approx(weights_per_gpu(ds, layout(1, 1, 8)))
    assert weights_per_gpu(ds, layout(8)) < weights_per_gpu(ds, layout(1, 1, 8, ep=True))


def test_layouts_cover_every_split() -> None:
    moe = resolve_model("mixtral-8x7b")
    got = {(lay.tensor_parallel_size, lay.pipeline_parallel_size, lay.data_parallel_size, lay.enable_expert_parallel,
            lay.replicas) for lay in layouts_for(moe, 4)}
    assert (1, 1, 4, True, 1) in got and (2, 1, 2, True, 1) in got and (1, 1, 1, False, 4) in got
    assert (4, 1, 1, False, 1) in got and (1, 4, 1, False, 1) in got
    assert all(t * p * d * r == 4 for t, p, d, _, r in got)
    dense = layouts_for(resolve_model("llama-3.1-8b"), 4)
    assert not any(lay.enable_expert_parallel or lay.replicas > 1 for lay in dense)


def test_command_uses_known_flags_and_drops_unknown_versions() -> None:
    cmd, dropped = build_command("org/model", layout(2, 2, 2, ep=True), max_model_len=8192, kv_cache_dtype="fp8",
                                 quantization="fp8", gpu_memory_utilization=0.9,
                                 vllm_version="0.34.0")
    assert cmd == ("vllm serve org/model --tensor-parallel-size 2 --pipeline-parallel-size 2 --data-parallel-size 2 "
                   "--enable-expert-parallel --max-model-len 8192 --kv-cache-dtype fp8 --quantization fp8")
    assert dropped == []
    old = recommend_parallelism(PlanInput(model="mixtral-8x7b", gpu="H100", gpus=2, vllm_version="0.7.0", top=50))
    assert all(not c.enable_expert_parallel and c.data_parallel_size == 1 for c in old.candidates)
    assert {r.rule for r in old.rejected} & {"flag.data-parallel-size", "flag.enable-expert-parallel"}


def test_plan_reasons_and_rejections_cite_kb_entries() -> None:
    kb = load_knowledge()
    out = recommend_parallelism(PlanInput(model="MiniMaxAI/MiniMax-M2", gpu="H100", gpus=8, top=50))
    assert out.feasible
    for cand in out.candidates:
        assert cand.reasons
        for cited in (*cand.reasons, *cand.warnings):
            assert cited.id in kb
            assert cited.attributed == (kb.get(cited.id).evidence == "attributed-claim")
        assert cand.estimate is not None and cand.estimate.label == "estimate"
    assert out.rejected and all(r.rule in kb for r in out.rejected)


def test_nothing_fits_says_what_would() -> None:
    out = recommend_parallelism(PlanInput(model="llama-3.1-70b", gpu="L40S", gpus=2))
    assert not out.feasible and out.candidates == []
    assert any("GPUs would fit" in tip for tip in out.what_would_fit)
    assert any("--quantization fp8" in tip for tip in out.what_would_fit)
    assert all(r.rule == "parallelism.memory-fits" for r in out.rejected)


def test_long_context_rejections_and_tips() -> None:
    out = recommend_parallelism(PlanInput(model="llama-3.1-8b", gpu="L40S", gpus=1, gpu_memory_gib=24,
                                          max_model_len=131072))
    assert not out.feasible
    assert out.rejected[0].rule == "parallelism.memory-fits" and "131072-token sequence" in out.rejected[0].why
    assert any(tip.startswith("--max-model-len 32768") for tip in out.what_would_fit)
    assert "user override" in out.hardware.sources[-1]


@pytest.mark.parametrize("kw", [
    {"max_model_len": 10_000_000}, {"isl": 200_000}, {"kv_cache_dtype": "int3"}, {"quantization": "zip"},
    {"gpu": "Z100"}, {"vllm_version": "latest"}, {"model": "no/such-model", "offline": True},
])
def test_bad_inputs_are_bad_input_errors(kw: dict[str, object]) -> None:
    base: dict[str, object] = {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 2}
    base.update(kw)
    with pytest.raises(BadInputError):
        recommend_parallelism(PlanInput.model_validate(base))


def test_input_validation() -> None:
    with pytest.raises(ValueError, match="either concurrency or rate"):
        PlanInput(model="m", gpu="H100", gpus=1, concurrency=4, rate=1.0)
    with pytest.raises(ValueError):
        PlanInput(model="m", gpu="H100", gpus=0)


def test_slo_and_rate() -> None:
    out = recommend_parallelism(PlanInput(model="llama-3.1-8b", gpu="H100", gpus=4, rate=5.0, slo_ttft_ms=1000,
                                          slo_tpot_ms=0.01, top=50))
    assert all(c.estimate is not None and c.estimate.meets_slo is False for c in out.candidates)
    assert all(c.estimate is not None and c.estimate.goodput_requests_per_s == 0 for c in out.candidates)
    ok = recommend_parallelism(PlanInput(model="llama-3.1-8b", gpu="H100", gpus=4, rate=5.0, slo_tpot_ms=1000))
    assert ok.candidates[0].estimate is not None and ok.candidates[0].estimate.meets_slo is True


def test_gpu_without_performance_facts_still_plans() -> None:
    out = recommend_parallelism(PlanInput(model="llama-3.1-8b", gpu="H20", gpus=2))
    assert out.feasible and all(c.estimate is None for c in out.candidates)
    assert any("no bandwidth/FLOPS facts" in w for w in out.warnings)


def test_partial_gpu_use_when_all_cannot_be_used() -> None:
    out = recommend_parallelism(PlanInput(model="llama-3.1-70b", gpu="H100", gpus=3, max_model_len=4096))
    assert out.feasible
    assert all(c.gpus_used <= 3 for c in out.candidates)


def test_pcie_prefers_pipeline_and_warns_on_tp() -> None:
    out = recommend_parallelism(PlanInput(model="llama-3.1-70b", gpu="H100", gpus=4, interconnect="pcie",
                                          goal="latency", top=50))
    tp = [c for c in out.candidates if c.tensor_parallel_size > 1]
    assert tp and all(any(w.id == "hardware.pcie-no-nvlink" for w in c.warnings) for c in tp)
    nvlink = recommend_parallelism(PlanInput(model="llama-3.1-70b", gpu="H100", gpus=4, goal="latency", top=50))
    tp4 = {c.tensor_parallel_size: c for c in nvlink.candidates if c.pipeline_parallel_size == 1}
    slow = {c.tensor_parallel_size: c for c in out.candidates if c.pipeline_parallel_size == 1}
    assert slow[4].estimate is not None and tp4[4].estimate is not None
    assert slow[4].estimate.tpot_ms > tp4[4].estimate.tpot_ms  # all-reduces over PCIe cost more
