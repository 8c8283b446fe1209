"""The recipe reference cases (vllm-facts.md section 7) as planner tests: expected layouts and rejections."""

from __future__ import annotations

from vllm_tune.tools.parallel import Candidate, PlanInput, PlanOutput, recommend_parallelism


def plan(model: str, gpu: str, gpus: int, **kw: object) -> PlanOutput:
    return recommend_parallelism(PlanInput(model=model, gpu=gpu, gpus=gpus, top=50, **kw))  # type: ignore[arg-type]


def layouts(out: PlanOutput) -> set[tuple[int, int, int, bool, int]]:
    return {(c.tensor_parallel_size, c.pipeline_parallel_size, c.data_parallel_size, c.enable_expert_parallel,
             c.replicas) for c in out.candidates}


def rejected_by(out: PlanOutput, tp: int, pp: int, dp: int, ep: bool) -> str | None:
    for r in out.rejected:
        if (r.tensor_parallel_size, r.pipeline_parallel_size, r.data_parallel_size, r.enable_expert_parallel,
                r.replicas) == (tp, pp, dp, ep, 1):
            return r.rule
    return None


def top(out: PlanOutput) -> Candidate:
    assert out.feasible and out.candidates
    return out.candidates[0]


def test_rc1_deepseek_r1_latency_tp8_throughput_dp8_ep() -> None:
    low = top(plan("deepseek-ai/DeepSeek-R1", "H200", 8, goal="latency"))
    assert low.tensor_parallel_size == 8
    high = top(plan("deepseek-ai/DeepSeek-R1", "H200", 8, goal="throughput"))
    assert (high.tensor_parallel_size, high.data_parallel_size, high.enable_expert_parallel) == (1, 8, True)
    assert "--data-parallel-size 8 --enable-expert-parallel" in high.command
    assert any(r.id == "parallelism.mla-moe-dp-attention-ep" for r in high.reasons)


def test_rc2_deepseek_r1_nvfp4_fits_four_b200() -> None:
    out = plan("deepseek-r1", "B200", 4, quantization="nvfp4")
    assert (4, 1, 1, True, 1) in layouts(out) and (1, 1, 4, True, 1) in layouts(out)


def test_rc3_deepseek_v32_avoids_tp8() -> None:
    out = plan("deepseek-ai/DeepSeek-V3.2", "H200", 8, goal="throughput")
    best = top(out)
    assert best.tensor_parallel_size <= 2 and best.enable_expert_parallel and best.data_parallel_size >= 4
    tp8 = [c for c in out.candidates if c.tensor_parallel_size == 8]
    assert tp8 and all(any(w.id == "pitfall.deepseek-v32-tp8" for w in c.warnings) for c in tp8)


def test_rc4_qwen3_coder_bf16_needs_the_whole_node() -> None:
    out = plan("Qwen/Qwen3-Coder-480B-A35B-Instruct", "H200", 8, goal="latency", max_model_len=32000)
    assert top(out).tensor_parallel_size == 8
    assert rejected_by(out, 1, 1, 8, True) == "parallelism.memory-fits"


def test_rc5_qwen3_coder_fp8_throughput_is_dp8_ep() -> None:
    out = plan("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "H200", 8, goal="throughput", max_model_len=131072)
    best = top(out)
    assert (best.tensor_parallel_size, best.data_parallel_size, best.enable_expert_parallel) == (1, 8, True)
    assert rejected_by(out, 8, 1, 1, False) == "pitfall.fp8-block-tp-cap"  # 2560 / 8 = 320


def test_rc6_qwen3_235b_fp8_tp_capped_at_4() -> None:
    eight = plan("Qwen/Qwen3-235B-A22B-FP8", "H200", 8)
    assert rejected_by(eight, 8, 1, 1, False) == "pitfall.fp8-block-tp-cap"
    assert rejected_by(eight, 4, 1, 2, False) == "parallelism.moe-tp-spans-dp"
    four = plan("Qwen/Qwen3-235B-A22B-FP8", "H200", 4, goal="latency")
    assert (4, 1, 1, False, 1) in layouts(four)


def test_rc12_llama_70b_fp8_one_gpu_per_replica() -> None:
    # The recipe serves FP8 weights with an FP8 KV cache; with that config TP1 replicas rank first.
    out = plan("meta-llama/Llama-3.3-70B-Instruct", "H200", 8, goal="throughput", quantization="fp8",
               kv_cache_dtype="fp8")
    best = top(out)
    assert (best.tensor_parallel_size, best.pipeline_parallel_size, best.data_parallel_size) == (1, 1, 8)
    assert "--quantization fp8" in best.command and "--kv-cache-dtype fp8" in best.command
    assert any(r.id == "distributed.smallest-tp-then-replicas" for r in best.reasons)
    bf16 = plan("meta-llama/Llama-3.3-70B-Instruct", "H100", 8)
    assert rejected_by(bf16, 1, 1, 8, False) == "parallelism.memory-fits"


def test_rc13_llama4_scout_fp8_needs_h200_class_memory() -> None:
    h100 = plan("llama-4-scout", "H100", 1, quantization="fp8")
    assert not h100.feasible and any("H100" in tip for tip in h100.what_would_fit)
    assert plan("llama-4-scout", "H200", 1, quantization="fp8").feasible


def test_rc14_gpt_oss_120b_tp1_for_throughput_more_tp_for_latency() -> None:
    assert top(plan("openai/gpt-oss-120b", "H100", 8, goal="throughput")).tensor_parallel_size == 1
    assert top(plan("openai/gpt-oss-120b", "H100", 8, goal="latency")).tensor_parallel_size == 8
    assert plan("openai/gpt-oss-120b", "A100", 1).feasible  # fits one 80 GB A100


def test_rc15_minimax_fp8_no_pure_tp8() -> None:
    out = plan("MiniMaxAI/MiniMax-M2", "H200", 8)
    assert rejected_by(out, 8, 1, 1, False) == "pitfall.fp8-block-tp-cap"
    assert rejected_by(out, 1, 1, 8, False) == "parallelism.moe-tp-spans-dp"
    got = layouts(out)
    assert {(1, 1, 8, True, 1), (4, 1, 2, True, 1), (8, 1, 1, True, 1)} <= got
    assert (4, 1, 1, False, 1) in layouts(plan("MiniMaxAI/MiniMax-M2", "H200", 4))


def test_rc18_kimi_k2_two_nodes_no_tp16() -> None:
    out = plan("moonshotai/Kimi-K2-Instruct", "H100", 16)
    assert rejected_by(out, 16, 1, 1, False) == "parallelism.tp-within-node"
    assert (8, 2, 1, False, 1) in layouts(out)
    tp8pp2 = next(c for c in out.candidates if (c.tensor_parallel_size, c.pipeline_parallel_size) == (8, 2))
    assert "--pipeline-parallel-size 2" in tp8pp2.command and out.nodes == 2


def test_rc22_small_model_replicas_big_model_tp() -> None:
    small = top(plan("Qwen/Qwen2.5-7B-Instruct", "A100", 4, goal="throughput"))
    assert (small.tensor_parallel_size, small.data_parallel_size) == (1, 4)
    big = plan("Qwen/Qwen2.5-72B-Instruct", "A100", 4, goal="latency")
    assert rejected_by(big, 1, 1, 4, False) == "parallelism.memory-fits"
    assert top(big).tensor_parallel_size == 4


def test_maverick_low_density_prefers_tp_only() -> None:
    out = plan("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "H100", 8)
    best = top(out)
    assert not best.enable_expert_parallel
    ep = [c for c in out.candidates if c.enable_expert_parallel]
    assert ep and all(any(w.id == "pitfall.ep-low-activation-density" for w in c.warnings) for c in ep)
