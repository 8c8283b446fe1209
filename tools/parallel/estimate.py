"""Step-time estimates per candidate: decode (bandwidth/compute per step plus fixed costs) and every prefill.

The model per replica, for `b` requests in flight of `isl` prompt and `osl` output tokens:

- one decode step reads this GPU's weights (touched experts only) and the batch's KV at the mean live context
  (isl + osl/2), does the GEMM and attention FLOPs, pays a fixed cost per step and per layer (kernel launches,
  sampler, scheduler) and two all-reduces per layer under TP;
- every request's prompt is prefilled once, compute-bound, inside the same steps (chunked prefill), so in the
  steady state a replica spends `b * t_prefill + osl * t_step` per `b * osl` output tokens;
- per-GPU efficiency falls as TP shrinks per-rank shapes.

The efficiencies and fixed costs are fitted to published measurements (params.py); the uncertainty printed with
each estimate is that fit's residual spread. Estimates, never measurements; run_benchmark verifies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_tune.tools.models.facts import GpuSpec, ModelFacts
from vllm_tune.tools.parallel.io import Estimate, Layout, MemoryBreakdown
from vllm_tune.tools.parallel.memory import kv_bytes_per_token_per_gpu, weights_per_gpu
from vllm_tune.tools.parallel.params import EstimatorParams, HardwareCalibration, gpu_family, load_params

PP_BUBBLE = 0.1  # per extra pipeline stage
CROSS_NODE_GBS = 50.0  # per GPU, one 400 Gb/s NIC per GPU
CROSS_NODE_LATENCY_US = 30.0  # when the fit has no multi-node rows
ACT_BYTES = 2.0


def estimate_assumptions(params: EstimatorParams) -> list[str]:
    flops = ", ".join(f"{k} {v:.0%}" for k, v in sorted(params.flops_efficiency.items()))
    lat = ", ".join(f"{k} {v:.0f} us" for k, v in sorted(params.allreduce_latency_us.items()))
    return [
        f"decode step: this GPU's weights (touched experts only) and the batch's KV at the mean live context "
        f"(isl + osl/2) at {params.bw_efficiency:.0%} of peak HBM bandwidth, GEMM + attention FLOPs, plus "
        f"{params.step_fixed_ms:.2f} ms per step, {params.layer_fixed_us:.1f} us per layer and "
        f"{params.seq_fixed_us:.1f} us per running request of fixed cost (MoE: {params.moe_layer_fixed_us:.0f} us "
        f"more per MoE layer, and {params.moe_efficiency:.0%} efficiency)",
        f"prefill: every prompt once, compute-bound, at {flops} of the dense tensor-core peak; a replica spends "
        "requests x prefill + osl x step time per cycle (chunked prefill mixed with decode)",
        f"TP: per-GPU efficiency / (1 + {params.tp_loss:.2f} x log2 TP); two all-reduces per layer at "
        f"{params.link_efficiency:.0%} of the link's per-direction bandwidth plus latency ({lat}); EP: dispatch + "
        f"combine all-to-all per MoE layer; {CROSS_NODE_GBS:.0f} GB/s per GPU across nodes",
        f"PP: {int(PP_BUBBLE * 100)}% extra step time per extra stage for bubbles and stage imbalance",
        "values fitted to published measurements: " + (params.source or "unknown"),
        "steady state, no prefix-cache hits, no speculative decoding; requests beyond the KV capacity queue",
    ]


def compute_dtype(facts: ModelFacts) -> str:
    if facts.quant.weight_dtype in ("fp8",):
        return "fp8"
    if facts.quant.weight_dtype in ("nvfp4", "mxfp4"):
        return "fp4"
    return "bf16"


@dataclass(frozen=True)
class Rates:
    """Effective per-GPU rates for one layout after efficiencies and calibration."""

    bw: float  # bytes/s
    flops: float  # FLOP/s (compute dtype)
    step_fixed_s: float
    layer_fixed_s: float
    seq_fixed_s: float
    moe_layer_fixed_s: float
    calibrated: bool


def rates_for(facts: ModelFacts, gpu: GpuSpec, tp: int, params: EstimatorParams,
              calibration: HardwareCalibration | None, engine: str = "vllm") -> Rates | None:
    dtype = compute_dtype(facts)
    peak_flops = gpu.tflops_for(dtype)
    if gpu.bandwidth_tbs is None or peak_flops is None:
        return None
    fam = params.family_scale.get(gpu_family(gpu.name), 1.0)
    # Another engine (a measurement from TensorRT-LLM, SGLang) runs the same work at its own efficiency.
    engine_scale = params.engine_scale.get(engine, 1.0)
    scale = fam * engine_scale / (1 + params.tp_loss * math.log2(tp))
    step_fixed = params.step_fixed_ms / 1e3 / engine_scale
    seq_fixed = params.seq_fixed_us / 1e6 / engine_scale
    if calibration is not None:
        scale *= calibration.efficiency_scale
        step_fixed = calibration.step_fixed_ms / 1e3
        seq_fixed = calibration.seq_fixed_us / 1e6
    # Below the fp8/fp4 tensor-core peak when a GPU lacks them, the bf16 peak is used at the bf16 efficiency.
    eff_dtype = dtype if dtype in gpu.tflops else "bf16"
    return Rates(bw=gpu.bandwidth_tbs * 1e12 * params.bw_efficiency * scale,
                 flops=peak_flops * 1e12 * params.flops_eff(eff_dtype) * scale,
                 step_fixed_s=step_fixed, layer_fixed_s=params.layer_fixed_us / 1e6 / engine_scale,
                 seq_fixed_s=seq_fixed, moe_layer_fixed_s=params.moe_layer_fixed_us / 1e6 / engine_scale,
                 calibrated=calibration is not None)


def _link(gpu: GpuSpec, interconnect: str, spans_nodes: bool, params: EstimatorParams) -> tuple[float, float]:
    """(bytes/s per direction, per-collective latency s) for one GPU."""
    if spans_nodes:
        lat_net = params.allreduce_latency_us.get("network", CROSS_NODE_LATENCY_US)
        return CROSS_NODE_GBS * 1e9 * params.link_efficiency, lat_net / 1e6
    bidir = gpu.interconnect.bandwidth_gbs or (128.0 if interconnect == "pcie" else 600.0)
    if interconnect == "pcie":
        bidir = min(bidir, 128.0)
    lat = params.allreduce_latency_us.get(interconnect) or params.allreduce_latency_us.get("unknown", 40.0)
    return bidir / 2 * 1e9 * params.link_efficiency, lat / 1e6


def _experts_touched(num_local: float, num_experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct local experts a batch of tokens routes to (uniform routing)."""
    if num_experts <= 0:
        return 0.0
    p_miss = math.pow(1 - top_k / num_experts, max(tokens, 0.0))
    return num_local * (1 - p_miss)


def _attention_width(facts: ModelFacts) -> int:
    """Per-head width attention multiplies over the context (MLA: the latent plus the rope part)."""
    if facts.mla is not None:
        return facts.mla.kv_lora_rank + facts.mla.qk_rope_head_dim
    return facts.head_dim


def _comm(facts: ModelFacts, gpu: GpuSpec, layout: Layout, tokens: float, *, interconnect: str, domain: int,
          params: EstimatorParams, layers: float) -> float:
    """Collective time for `tokens` tokens passing `layers` layers of one stage."""
    tp, dp, pp = layout.tensor_parallel_size, layout.data_parallel_size, layout.pipeline_parallel_size
    moe = facts.moe
    moe_layers = (moe.num_moe_layers / pp) if moe is not None else 0.0
    t = 0.0
    if tp > 1:
        bw, lat = _link(gpu, interconnect, tp > domain, params)
        msg = tokens * facts.hidden_size * ACT_BYTES
        t += layers * 2 * (2 * (tp - 1) / tp * msg / bw + lat)
    if layout.enable_expert_parallel and moe is not None:
        ep = layout.expert_parallel_size
        bw, lat = _link(gpu, interconnect, ep > domain, params)
        msg = tokens * (moe.top_k or 1) * facts.hidden_size * ACT_BYTES * (ep - 1) / ep
        t += moe_layers * 2 * (msg / bw + lat)
    if moe is not None and not layout.enable_expert_parallel and dp > 1:
        # Experts are sliced over TP x DP: tokens of all DP ranks are gathered, then the outputs scattered back.
        group = tp * dp
        bw, lat = _link(gpu, interconnect, group > domain, params)
        msg = tokens * dp * facts.hidden_size * ACT_BYTES
        t += moe_layers * 2 * ((group - 1) / group * msg / bw + lat)
    if pp > 1:
        bw, lat = _link(gpu, interconnect, False, params)
        t += (pp - 1) * (tokens * facts.hidden_size * ACT_BYTES / bw + lat) / pp
    return t


@dataclass(frozen=True)
class StepTimes:
    step_s: float  # one decode step of the whole replica (all stages)
    prefill_s: float  # one prompt's prefill
    bound: str


def step_times(facts: ModelFacts, gpu: GpuSpec, layout: Layout, rates: Rates, *, batch: float, isl: int, osl: int,
               kv_cache_dtype: str, interconnect: str, domain: int, params: EstimatorParams) -> StepTimes:
    tp, pp, dp = layout.tensor_parallel_size, layout.pipeline_parallel_size, layout.data_parallel_size
    layers_stage = math.ceil(facts.num_layers / pp)
    moe = facts.moe
    # PP: the batch is split into up to pp micro-batches of at least one sequence each.
    micro = max(1.0, batch / pp) if pp > 1 else batch
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
    attn_layers = math.ceil(facts.num_full_attention_layers / pp)
    heads_rank = max(1, facts.num_attention_heads // tp)
    attn_flops = 4 * micro * ctx * heads_rank * _attention_width(facts) * attn_layers
    gemm_flops = 2 * facts.params_active * micro / (tp * pp)
    moe_eff = params.moe_efficiency if moe is not None else 1.0
    t_mem = (weights + kv_read) / (rates.bw * moe_eff)
    t_cmp = (gemm_flops + attn_flops) / (rates.flops * moe_eff)
    bound = "memory bandwidth (decode)" if t_mem >= t_cmp else "compute (decode)"
    t_comm = _comm(facts, gpu, layout, micro, interconnect=interconnect, domain=domain, params=params,
                   layers=layers_stage)
    t_stage = max(t_mem, t_cmp) + t_comm + layers_stage * rates.layer_fixed_s
    if moe is not None:
        t_stage += (moe.num_moe_layers / pp) * rates.moe_layer_fixed_s
    fixed = rates.step_fixed_s + batch * rates.seq_fixed_s
    step = t_stage * pp * (1 + PP_BUBBLE * (pp - 1)) + fixed
    if fixed + layers_stage * pp * rates.layer_fixed_s > 0.5 * step:
        bound = "fixed per-step cost (launches, scheduler)"

    # Prefill: one prompt through all stages; compute-bound (GEMMs + causal attention).
    attn_pf = 2 * facts.num_full_attention_layers * isl * isl * facts.num_attention_heads * _attention_width(facts)
    t_pf = (2 * facts.params_active * isl + attn_pf) / (rates.flops * tp * moe_eff)
    t_pf += _comm(facts, gpu, layout.model_copy(update={"pipeline_parallel_size": 1}), isl,
                  interconnect=interconnect, domain=domain, params=params, layers=facts.num_layers)
    return StepTimes(step_s=step, prefill_s=t_pf, bound=bound)


def estimate_for(facts: ModelFacts, gpu: GpuSpec, layout: Layout, memory: MemoryBreakdown, *, isl: int, osl: int,
                 concurrency_total: float, kv_cache_dtype: str, interconnect: str, gpus_per_node: int,
                 slo_ttft_ms: float | None, slo_tpot_ms: float | None, params: EstimatorParams | None = None,
                 calibration: HardwareCalibration | None = None, max_num_seqs: int | None = None,
                 engine: str = "vllm") -> Estimate | None:
    """Estimated TTFT, TPOT and throughput at the given total load; None when the GPU lacks bandwidth/FLOPS facts.

    The total load is spread evenly over the layout's replicas; a replica holds at most what its KV cache
    takes at the mean live context (and max_num_seqs); the rest queue.
    """
    p = params or load_params()
    rates = rates_for(facts, gpu, layout.tensor_parallel_size, p, calibration, engine)
    if rates is None:
        return None
    replicas = layout.data_parallel_size * layout.replicas
    conc = max(1.0, concurrency_total / replicas)
    cap = max(memory.max_concurrency_at_workload, 1e-9)
    limit = "KV cache capacity"
    if max_num_seqs is not None and max_num_seqs < cap:
        cap, limit = float(max_num_seqs), "max_num_seqs"
    queued = False
    if conc > cap:
        conc, queued = max(1.0, math.floor(cap)), True
    times = step_times(facts, gpu, layout, rates, batch=conc, isl=isl, osl=osl, kv_cache_dtype=kv_cache_dtype,
                       interconnect=interconnect, domain=gpus_per_node, params=p)
    cycle = conc * times.prefill_s + osl * times.step_s
    ttft = times.prefill_s + times.step_s  # a prompt also waits for the running step it joins
    tpot = (cycle - ttft) / (osl - 1) if osl > 1 else times.step_s
    out_tps = replicas * conc * osl / cycle
    bottleneck = f"{limit} (requests queue)" if queued else times.bound
    meets: bool | None = None
    goodput: float | None = None
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        meets = (slo_ttft_ms is None or ttft * 1e3 <= slo_ttft_ms) and (slo_tpot_ms is None or
                                                                          tpot * 1e3 <= slo_tpot_ms)
        goodput = replicas * conc / cycle if meets else 0.0
    uncertainty = p.uncertainty()
    if calibration is not None:
        uncertainty += f"; calibrated for {calibration.hardware} from {len(calibration.runs)} run(s)"
    return Estimate(concurrency_per_replica=conc, ttft_ms=ttft * 1e3, tpot_ms=tpot * 1e3, output_tokens_per_s=out_tps,
                    output_tokens_per_s_per_gpu=out_tps / layout.gpus_used, meets_slo=meets,
                    goodput_requests_per_s=goodput, uncertainty=uncertainty, bottleneck=bottleneck,
                    calibration=calibration.hardware if calibration is not None else None)
