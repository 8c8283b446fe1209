"""Per-GPU memory model: weights, activations, overheads and the KV cache that is left."""

from __future__ import annotations

import math

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.models.config_parse import quant_info
from vllm_tune.tools.models.facts import GpuSpec, ModelFacts, WeightBreakdown, kv_dtype_bytes
from vllm_tune.tools.parallel.io import Layout, MemoryBreakdown

GIB = 2**30
# Fixed allowances (assumptions, stated in every plan): CUDA graphs + allocator slack, and NCCL/all-to-all buffers.
BASE_OVERHEAD_GIB = 1.5
COMM_OVERHEAD_GIB = 0.5
# Peak batch of the profiling run: vLLM profiles with max_num_batched_tokens tokens (8192 is a common default).
PROFILE_TOKENS = 8192
PROFILE_SEQS = 256
MEMORY_ASSUMPTIONS = [
    f"activations: one profiling batch of {PROFILE_TOKENS} tokens and {PROFILE_SEQS} sampled sequences "
    "(hidden + per-rank MLP activations in 16-bit, logits in fp32)",
    f"overhead: {BASE_OVERHEAD_GIB} GiB for CUDA graphs and allocator slack, plus {COMM_OVERHEAD_GIB} GiB "
    "of communication buffers when more than one GPU cooperates",
    "weights: counted from the architecture (or the safetensors index size) and split by TP/PP/EP as vLLM "
    "shards them; embeddings and lm_head are vocabulary-parallel over TP",
]


def served_facts(facts: ModelFacts, quantization: str | None) -> tuple[ModelFacts, bool, list[str]]:
    """The model as it will be served under --quantization (online or a pre-quantized variant).

    Returns (facts, online_flag_needed, notes). Only FP8 can be applied online to an unquantized checkpoint;
    other formats need a pre-quantized checkpoint, whose sizes are estimated here.
    """
    if quantization is None or quantization.lower() in ("none", "auto"):
        return facts, False, []
    q = quantization.lower()
    if facts.quant.quant_method == q or (facts.quant.weight_dtype == q and facts.quant.quant_method):
        return facts, False, []
    new_quant = quant_info(q, facts.torch_dtype)
    if new_quant.quant_method is None:  # bf16/fp16 requested
        if facts.quant.quant_method is not None:
            raise BadInputError(f"{facts.name} is stored as {facts.quant.weight_dtype}; it cannot be served as {q}")
        return facts, False, []
    notes: list[str] = []
    online = q == "fp8" and facts.quant.quant_method is None
    if online:
        notes.append("FP8 applied online (--quantization fp8): per-tensor scales, no block-size constraint")
    else:
        notes.append(f"{q} needs a pre-quantized checkpoint of this architecture (e.g. a published {q} variant); "
                     "its size is estimated from the architecture")
    ratio = new_quant.bytes_per_param / facts.quant.bytes_per_param
    w = facts.weights
    new_weights = None
    if w is not None:
        new_weights = w.model_copy(update={
            "attention_bytes_per_layer": int(w.attention_bytes_per_layer * ratio),
            "dense_mlp_bytes_per_layer": int(w.dense_mlp_bytes_per_layer * ratio),
            "moe_shared_bytes_per_layer": int(w.moe_shared_bytes_per_layer * ratio),
            "expert_bytes": int(w.expert_bytes * ratio)})
    embed = (w.embedding_bytes + w.lm_head_bytes) if w else 0
    ckpt = int(embed + (facts.checkpoint_bytes - embed) * ratio)
    served = facts.model_copy(update={"quant": new_quant, "weights": new_weights, "checkpoint_bytes": ckpt,
                                      "checkpoint_bytes_source": "computed"})
    return served, online, notes


def _scale(facts: ModelFacts, w: WeightBreakdown) -> float:
    """Scale architecture-derived bytes to the real checkpoint size when the index gave it."""
    experts = facts.moe.num_experts if facts.moe else 0
    dense_layers = facts.moe.num_dense_layers if facts.moe else facts.num_layers
    moe_layers = facts.moe.num_moe_layers if facts.moe else 0
    computed = (w.embedding_bytes + w.lm_head_bytes + facts.num_layers * w.attention_bytes_per_layer
                + dense_layers * w.dense_mlp_bytes_per_layer
                + moe_layers * (w.moe_shared_bytes_per_layer + experts * w.expert_bytes))
    if facts.checkpoint_bytes_source not in ("index", "files") or computed <= 0:
        return 1.0
    return max(0.5, min(2.0, facts.checkpoint_bytes / computed))


def weights_per_gpu(facts: ModelFacts, layout: Layout) -> float:
    """Weight bytes on the most loaded GPU (the first or last pipeline stage)."""
    tp, pp, dp = layout.tensor_parallel_size, layout.pipeline_parallel_size, layout.data_parallel_size
    w = facts.weights
    if w is None:
        # Incomplete architecture: assume everything is sharded by TP x PP only (conservative for MoE with DP).
        return facts.checkpoint_bytes / (tp * pp)
    scale = _scale(facts, w)
    layers_per_stage = math.ceil(facts.num_layers / pp)
    share = layers_per_stage / facts.num_layers
    moe = facts.moe
    dense_layers = moe.num_dense_layers if moe else facts.num_layers
    moe_layers = moe.num_moe_layers if moe else 0
    per_stage = facts.num_layers * w.attention_bytes_per_layer * share / tp
    per_stage += dense_layers * share * w.dense_mlp_bytes_per_layer / tp
    per_stage += moe_layers * share * w.moe_shared_bytes_per_layer / tp
    if moe is not None:
        # With or without EP the routed experts are spread over all TP x DP ranks of the stage.
        per_stage += moe_layers * share * moe.num_experts * w.expert_bytes / (tp * dp)
    if pp == 1:
        per_stage += (w.embedding_bytes + w.lm_head_bytes) / tp
    else:
        per_stage += max(w.embedding_bytes, w.lm_head_bytes) / tp
    return per_stage * scale


def kv_bytes_per_token_per_gpu(facts: ModelFacts, layout: Layout, kv_cache_dtype: str) -> float:
    """KV bytes one token occupies on one GPU of the most loaded stage."""
    tp, pp = layout.tensor_parallel_size, layout.pipeline_parallel_size
    layers = math.ceil(facts.num_full_attention_layers / pp)
    elem = kv_dtype_bytes(kv_cache_dtype, facts.torch_dtype)
    if facts.mla is not None:
        # MLA caches one latent vector per token; every TP rank keeps a full copy.
        return layers * (facts.mla.kv_lora_rank + facts.mla.qk_rope_head_dim) * elem
    kv_heads_per_rank = max(1, facts.num_kv_heads // tp)
    return layers * 2 * kv_heads_per_rank * facts.head_dim * elem


def sliding_bytes_per_seq(facts: ModelFacts, layout: Layout, kv_cache_dtype: str, seq_len: int) -> float:
    """KV bytes of the sliding-window layers for one sequence (bounded by the window)."""
    if not facts.num_sliding_layers or not facts.sliding_window:
        return 0.0
    tp, pp = layout.tensor_parallel_size, layout.pipeline_parallel_size
    elem = kv_dtype_bytes(kv_cache_dtype, facts.torch_dtype)
    per_layer = 2 * max(1, facts.num_kv_heads // tp) * facts.head_dim * elem
    return math.ceil(facts.num_sliding_layers / pp) * per_layer * min(seq_len, facts.sliding_window)


def activation_bytes(facts: ModelFacts, layout: Layout) -> float:
    tp = layout.tensor_parallel_size
    moe = facts.moe
    if moe is not None and moe.moe_intermediate_size:
        moe_tp = 1 if layout.enable_expert_parallel else tp * layout.data_parallel_size
        inter = max(facts.intermediate_size or 0, moe.moe_intermediate_size * (moe.top_k or 1) // moe_tp * tp)
    else:
        inter = facts.intermediate_size or 4 * facts.hidden_size
    per_token = (4 * facts.hidden_size + 2 * inter / tp) * 2
    logits = PROFILE_SEQS * facts.vocab_size / tp * 4
    return PROFILE_TOKENS * per_token + logits


def memory_for(facts: ModelFacts, gpu: GpuSpec, layout: Layout, *, gpu_memory_utilization: float,
               kv_cache_dtype: str, max_model_len: int, workload_len: float) -> MemoryBreakdown:
    """Per-GPU memory; workload_len is the mean live context of a request (isl + osl/2: blocks are allocated
    on demand as tokens are generated)."""
    usable = gpu.memory_gib * GIB * gpu_memory_utilization
    weights = weights_per_gpu(facts, layout)
    act = activation_bytes(facts, layout)
    overhead = BASE_OVERHEAD_GIB * GIB + (COMM_OVERHEAD_GIB * GIB if layout.gpus_used > 1 else 0.0)
    kv = usable - weights - act - overhead
    per_token = kv_bytes_per_token_per_gpu(facts, layout, kv_cache_dtype)
    tokens = int(max(kv, 0) // per_token) if per_token > 0 else 0
    seq_sliding = sliding_bytes_per_seq(facts, layout, kv_cache_dtype, max_model_len)
    need_max = max_model_len * per_token + seq_sliding
    need_work = workload_len * per_token + sliding_bytes_per_seq(facts, layout, kv_cache_dtype,
                                                                 math.ceil(workload_len))
    return MemoryBreakdown(
        usable_gib=usable / GIB, weights_gib=weights / GIB, activation_gib=act / GIB, overhead_gib=overhead / GIB,
        kv_cache_gib=kv / GIB, kv_bytes_per_token=per_token, kv_tokens_per_replica=tokens,
        max_concurrency_at_max_len=max(kv, 0) / need_max if need_max else 0.0,
        max_concurrency_at_workload=max(kv, 0) / need_work if need_work else 0.0,
    )
