"""Roofline estimates per candidate: prefill compute-bound, decode bandwidth-bound, plus TP/EP communication.

These are estimates from datasheet peaks and fixed efficiencies, never measurements; run_benchmark verifies them.
"""

from __future__ import annotations

import math

from vllm_tune.tools.models.facts import GpuSpec, ModelFacts
from vllm_tune.tools.parallel.io import Estimate, Layout, MemoryBreakdown
from vllm_tune.tools.parallel.memory import kv_bytes_per_token_per_gpu, weights_per_gpu

BW_EFFICIENCY = 0.7  # share of peak HBM bandwidth decode kernels reach
FLOPS_EFFICIENCY = 0.5  # share of dense peak prefill GEMMs reach
LINK_EFFICIENCY = 0.7
COLLECTIVE_LATENCY_S = {"nvlink": 8e-6, "xgmi": 12e-6, "pcie": 30e-6, "unknown": 30e-6}
PP_BUBBLE = 0.1  # per extra pipeline stage
CROSS_NODE_GBS = 50.0  # per GPU, one 400 Gb/s NIC per GPU
ESTIMATE_ASSUMPTIONS = [
    f"decode reads this GPU's weights (touched experts only) and the batch's KV once per step at "
    f"{int(BW_EFFICIENCY * 100)}% of peak HBM bandwidth",
    f"prefill runs at {int(FLOPS_EFFICIENCY * 100)}% of the dense tensor-core peak for the weight dtype",
    "TP: two all-reduces per layer; EP: dispatch + combine all-to-all per MoE layer; link bandwidth at "
    f"{int(LINK_EFFICIENCY * 100)}% of the catalog's per-direction figure; {CROSS_NODE_GBS:.0f} GB/s per GPU "
    "across nodes",
    f"PP: {int(PP_BUBBLE * 100)}% extra step time per extra stage for bubbles and stage imbalance",
    "steady state, no queueing beyond the KV capacity, no prefix-cache hits, no speculative decoding",
]
UNCERTAINTY = "roofline from datasheet peaks; expect +/-50% or worse (kernel choice, scheduling, batching noise)"


def _compute_dtype(facts: ModelFacts) -> str:
    if facts.quant.weight_dtype in ("fp8",):
        return "fp8"
    if facts.quant.weight_dtype in ("nvfp4", "mxfp4"):
        return "fp4"
    return "bf16"


def _link(gpu: GpuSpec, interconnect: str, spans_nodes: bool) -> tuple[float, float]:
    """(bytes/s per direction, per-collective latency s) for one GPU."""
    if spans_nodes:
        return CROSS_NODE_GBS * 1e9 * LINK_EFFICIENCY, 20e-6
    bidir = gpu.interconnect.bandwidth_gbs or (128.0 if interconnect == "pcie" else 600.0)
    if interconnect == "pcie":
        bidir = min(bidir, 128.0)
    return bidir / 2 * 1e9 * LINK_EFFICIENCY, COLLECTIVE_LATENCY_S.get(interconnect, 30e-6)


def _experts_touched(num_local: float, num_experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct local experts a batch of tokens routes to (uniform routing)."""
    if num_experts <= 0:
        return 0.0
    p_miss = math.pow(1 - top_k / num_experts, max(tokens, 0.0))
    return num_local * (1 - p_miss)


def estimate_for(facts: ModelFacts, gpu: GpuSpec, layout: Layout, memory: MemoryBreakdown, *, isl: int, osl: int,
                 concurrency_total: float, kv_cache_dtype: str, interconnect: str, gpus_per_node: int,
                 slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> Estimate | None:
    """Estimated TTFT, TPOT and throughput at the given load; None when the GPU lacks bandwidth/FLOPS facts."""
    peak_flops = gpu.tflops_for(_compute_dtype(facts))
    if gpu.bandwidth_tbs is None or peak_flops is None:
        return None
    bw = gpu.bandwidth_tbs * 1e12 * BW_EFFICIENCY
    flops = peak_flops * 1e12 * FLOPS_EFFICIENCY
    tp, pp, dp = layout.tensor_parallel_size, layout.pipeline_parallel_size, layout.data_parallel_size
    replicas = dp * layout.replicas
    conc = max(1.0, concurrency_total / replicas)
    cap = max(memory.max_concurrency_at_workload, 1e-9)
    bottleneck = "memory bandwidth (decode)"
    if conc > cap:
        conc = max(1.0, math.floor(cap))
        bottleneck = "KV cache capacity (requests queue)"
    layers_stage = math.ceil(facts.num_layers / pp)
    moe = facts.moe

    # Decode step of one pipeline stage for a micro-batch of conc/pp sequences.
    micro = conc / pp if pp > 1 else conc
    weights = weights_per_gpu(facts, layout)
    if moe is not None and facts.weights is not None:
        expert_b = facts.weights.expert_bytes
        ep_ranks = tp * dp
        local = moe.num_experts / ep_ranks if layout.enable_expert_parallel else moe.num_experts
        per_expert_gpu = expert_b if layout.enable_expert_parallel else expert_b / ep_ranks
        stage_moe_layers = moe.num_moe_layers / pp
        resident = stage_moe_layers * local * per_expert_gpu
        tokens_seen = micro * dp  # tokens of every DP rank meet in the MoE layer, with or without EP
        touched = _experts_touched(local, moe.num_experts, moe.top_k or 1, tokens_seen)
        weights = weights - resident + stage_moe_layers * touched * per_expert_gpu
    ctx = isl + osl / 2
    kv_read = micro * ctx * kv_bytes_per_token_per_gpu(facts, layout, kv_cache_dtype)
    step_flops = 2 * facts.params_active * micro / (tp * pp)
    t_mem = (weights + kv_read) / bw
    t_cmp = step_flops / flops
    if t_cmp > t_mem:
        bottleneck = "compute (decode)" if bottleneck.startswith("memory") else bottleneck

    spans_nodes = tp > gpus_per_node
    link_bw, lat = _link(gpu, interconnect, spans_nodes)
    act_bytes = 2.0
    t_comm = 0.0
    if tp > 1:
        msg = micro * facts.hidden_size * act_bytes
        t_comm += layers_stage * 2 * (2 * (tp - 1) / tp * msg / link_bw + lat)
    if layout.enable_expert_parallel and moe is not None:
        ep = layout.expert_parallel_size
        ep_spans = ep > gpus_per_node
        ep_bw, ep_lat = _link(gpu, interconnect, ep_spans)
        msg = micro * (moe.top_k or 1) * facts.hidden_size * act_bytes * (ep - 1) / ep
        t_comm += (moe.num_moe_layers / pp) * 2 * (msg / ep_bw + ep_lat)
    if moe is not None and not layout.enable_expert_parallel and dp > 1:
        # Experts are sliced over TP x DP: tokens of all DP ranks are gathered, then the outputs scattered back.
        group = tp * dp
        g_bw, g_lat = _link(gpu, interconnect, group > gpus_per_node)
        msg = micro * dp * facts.hidden_size * act_bytes
        t_comm += (moe.num_moe_layers / pp) * 2 * ((group - 1) / group * msg / g_bw + g_lat)
    if pp > 1:
        t_comm += (pp - 1) * (micro * facts.hidden_size * act_bytes / link_bw + lat) / pp
    t_stage = max(t_mem, t_cmp) + t_comm
    # Pipeline bubbles and stage imbalance: each extra stage costs a share of the step (assumption).
    tpot = t_stage * pp * (1 + PP_BUBBLE * (pp - 1))

    # Prefill: one prompt through all stages; compute-bound.
    attn_flops = 2 * facts.num_full_attention_layers * isl * isl * facts.num_attention_heads * facts.head_dim
    prefill_flops = 2 * facts.params_active * isl + attn_flops
    t_prefill = prefill_flops / (flops * tp)
    if tp > 1:
        msg = isl * facts.hidden_size * act_bytes
        t_prefill += facts.num_layers * 2 * (2 * (tp - 1) / tp * msg / link_bw + lat)
    if layout.enable_expert_parallel and moe is not None:
        ep = layout.expert_parallel_size
        ep_bw, _ = _link(gpu, interconnect, ep > gpus_per_node)
        t_prefill += moe.num_moe_layers * 2 * isl * (moe.top_k or 1) * facts.hidden_size * act_bytes / ep_bw / tp
    if moe is not None and not layout.enable_expert_parallel and dp > 1:
        group = tp * dp
        g_bw, g_lat = _link(gpu, interconnect, group > gpus_per_node)
        t_prefill += moe.num_moe_layers * 2 * ((group - 1) / group * isl * facts.hidden_size * act_bytes / g_bw
                                               + g_lat)
    ttft = t_prefill + tpot  # a prompt also waits for the running decode step it joins

    per_request_s = ttft + osl * tpot
    out_tps = replicas * conc * osl / per_request_s
    meets: bool | None = None
    goodput: float | None = None
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        meets = (slo_ttft_ms is None or ttft * 1e3 <= slo_ttft_ms) and (slo_tpot_ms is None or
                                                                          tpot * 1e3 <= slo_tpot_ms)
        goodput = replicas * conc / per_request_s if meets else 0.0
    return Estimate(concurrency_per_replica=conc, ttft_ms=ttft * 1e3, tpot_ms=tpot * 1e3, output_tokens_per_s=out_tps,
                    output_tokens_per_s_per_gpu=out_tps / layout.gpus_used, meets_slo=meets,
                    goodput_requests_per_s=goodput, uncertainty=UNCERTAINTY, bottleneck=bottleneck)
