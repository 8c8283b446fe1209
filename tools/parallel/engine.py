"""recommend_parallelism: enumerate every layout, reject the invalid ones by rule, estimate and rank the rest."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.models.catalog import get_gpu
from vllm_tune.tools.models.facts import GpuSpec, ModelFacts, kv_dtype_bytes
from vllm_tune.tools.models.resolve import resolve_model
from vllm_tune.tools.parallel import rules as R
from vllm_tune.tools.parallel.command import FLAG_IDS, check_version, flag_valid, render_command, serve_args
from vllm_tune.tools.parallel.estimate import estimate_assumptions
from vllm_tune.tools.parallel.io import (
    Candidate,
    Cited,
    Estimate,
    LaunchKind,
    Layout,
    MemoryBreakdown,
    NodeCommand,
    PlanInput,
    PlanOutput,
    Rejected,
)
from vllm_tune.tools.parallel.memory import MEMORY_ASSUMPTIONS, memory_for, served_facts
from vllm_tune.tools.parallel.multinode import plan_launch
from vllm_tune.tools.parallel.params import EstimatorParams, HardwareCalibration, calibration_for, load_params
from vllm_tune.tools.parallel.predict import default_max_num_seqs, predict
from vllm_tune.tools.parallel.ranking import order_for_goal, why_first

__all__ = ["default_max_num_seqs", "layouts_for", "recommend_parallelism"]

MAX_REJECTED_SHOWN = 40
SLO_MISS_PENALTY = 0.01
# With no load given every layout is compared at the same total load: for throughput 128 requests per GPU
# (enough to put any layout in its batched regime; a replica that cannot hold its share queues the rest), for
# latency one request, for balanced 64.
THROUGHPUT_LOAD_PER_GPU = 128
BALANCED_LOAD = 64


@dataclass
class _Context:
    facts: ModelFacts
    gpu: GpuSpec
    request: PlanInput
    gpus_per_node: int
    nvlink_domain: int
    interconnect: str
    max_model_len: int
    kv_cache_dtype: str
    online_quantization: str | None
    concurrency: float
    params: EstimatorParams
    calibration: HardwareCalibration | None
    notes: list[str] = field(default_factory=list)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts_for(facts: ModelFacts, gpus_used: int) -> list[Layout]:
    """Every TP x PP x DP (x EP on/off for MoE) split of exactly gpus_used GPUs."""
    out: list[Layout] = []
    for tp in _divisors(gpus_used):
        for pp in _divisors(gpus_used // tp):
            dp = gpus_used // (tp * pp)
            eps = [False, True] if facts.moe is not None and tp * dp > 1 else [False]
            for ep in eps:
                out.append(Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp,
                                  enable_expert_parallel=ep, expert_parallel_size=tp * dp if ep else 1,
                                  gpus_used=gpus_used))
            if facts.moe is not None and dp > 1:
                # MoE: vLLM's DP shards experts over the DP ranks; independent copies do not.
                for ep in ([False, True] if tp > 1 else [False]):
                    out.append(Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=1,
                                      enable_expert_parallel=ep, expert_parallel_size=tp if ep else 1,
                                      replicas=dp, gpus_used=gpus_used))
    return out


def _flag_violation(layout: Layout, version: str) -> R.Violation | None:
    needed = []
    if layout.pipeline_parallel_size > 1:
        needed.append("--pipeline-parallel-size")
    if layout.data_parallel_size > 1:
        needed.append("--data-parallel-size")
    if layout.enable_expert_parallel:
        needed.append("--enable-expert-parallel")
    for flag in needed:
        if not flag_valid(flag, version):
            return R.Violation(FLAG_IDS[flag], f"{flag} does not exist in vLLM {version}")
    return None


def _check(ctx: _Context, layout: Layout) -> tuple[R.Violation | None, MemoryBreakdown | None]:
    violations = R.structural_violations(ctx.facts, layout, nvlink_domain=ctx.nvlink_domain)
    if violations:
        return violations[0], None
    flag_problem = _flag_violation(layout, ctx.request.vllm_version)
    if flag_problem is not None:
        return flag_problem, None
    mem = memory_for(ctx.facts, ctx.gpu, layout, gpu_memory_utilization=ctx.request.gpu_memory_utilization,
                     kv_cache_dtype=ctx.kv_cache_dtype, max_model_len=ctx.max_model_len,
                     workload_len=ctx.request.isl + ctx.request.osl / 2)
    if mem.kv_cache_gib <= 0:
        return R.Violation(R.R_MEMORY, f"weights {mem.weights_gib:.1f} GiB + activations and overhead "
                                       f"{mem.activation_gib + mem.overhead_gib:.1f} GiB exceed the "
                                       f"{mem.usable_gib:.1f} GiB usable per GPU"), mem
    if mem.max_concurrency_at_max_len < 1:
        return R.Violation(R.R_MEMORY, f"KV space {mem.kv_cache_gib:.2f} GiB holds {mem.kv_tokens_per_replica} "
                                       f"tokens, less than one {ctx.max_model_len}-token sequence"), mem
    return None, mem


def _default_max_len(facts: ModelFacts, request: PlanInput) -> int:
    need = request.isl + request.osl
    if request.max_model_len is not None:
        if request.max_model_len > facts.max_position_embeddings:
            raise BadInputError(f"max model length {request.max_model_len} exceeds the model's "
                                f"{facts.max_position_embeddings} positions")
        if request.max_model_len < need:
            raise BadInputError(f"max model length {request.max_model_len} is shorter than isl+osl = {need}")
        return request.max_model_len
    if need > facts.max_position_embeddings:
        raise BadInputError(f"isl+osl = {need} exceeds the model's {facts.max_position_embeddings} positions")
    return min(facts.max_position_embeddings, max(4096, 1 << math.ceil(math.log2(need))))


def _gpu_for(request: PlanInput) -> GpuSpec:
    gpu = get_gpu(request.gpu)
    update: dict[str, object] = {}
    if request.gpu_memory_gib is not None:
        update["memory_gib"] = request.gpu_memory_gib
        update["memory_estimated"] = False
    if request.gpu_bandwidth_tbs is not None:
        update["bandwidth_tbs"] = request.gpu_bandwidth_tbs
    if update:
        update["sources"] = [*gpu.sources, "user override: " + ", ".join(sorted(update))]
        gpu = gpu.model_copy(update=update)
    return gpu


def _context(request: PlanInput, facts: ModelFacts | None = None) -> _Context:
    check_version(request.vllm_version)
    raw = facts or resolve_model(request.model, revision=request.revision, offline=request.offline)
    served, online, qnotes = served_facts(raw, request.quantization)
    kv_dtype_bytes(request.kv_cache_dtype, served.torch_dtype)  # validates the name
    gpu = _gpu_for(request)
    per_node = request.gpus_per_node or gpu.gpus_per_node
    interconnect = request.interconnect or gpu.interconnect.kind
    # GB200-class racks form one NVLink domain larger than a compute tray.
    domain = 72 if gpu.name in ("GB200", "GB300") and interconnect == "nvlink" else per_node
    load = float(request.concurrency) if request.concurrency is not None else 0.0
    notes = list(qnotes)
    if request.concurrency is None and request.rate is None:
        load = {"throughput": float(THROUGHPUT_LOAD_PER_GPU * request.gpus), "latency": 1.0,
                "balanced": float(BALANCED_LOAD)}[request.goal]
        notes.append({"throughput": f"no load given: every layout is estimated at the same total load, "
                                    f"{THROUGHPUT_LOAD_PER_GPU} requests per GPU ({load:.0f} in flight), spread "
                                    "over its replicas; a replica holds what its KV cache and vLLM's default "
                                    f"max_num_seqs ({default_max_num_seqs(gpu)}) allow and queues the rest",
                      "latency": "no load given: every layout is estimated with one request in flight",
                      "balanced": f"no load given: every layout is estimated at {BALANCED_LOAD} concurrent "
                                  "requests in total"}[request.goal])
    calibration = calibration_for(gpu.name)
    if calibration is not None:
        notes.append(f"using the calibration for {gpu.name} fitted from {len(calibration.runs)} benchmark run(s) "
                     f"(step cost {calibration.step_fixed_ms:.2f} ms, efficiency x{calibration.efficiency_scale:.2f}; "
                     "vllm-tune calibrate)")
    return _Context(facts=served, gpu=gpu, request=request, gpus_per_node=per_node, nvlink_domain=domain,
                    interconnect=interconnect, max_model_len=_default_max_len(served, request),
                    kv_cache_dtype=request.kv_cache_dtype, online_quantization="fp8" if online else None,
                    concurrency=load, params=load_params(), calibration=calibration, notes=notes)


def _estimate(ctx: _Context, layout: Layout, mem: MemoryBreakdown) -> Estimate | None:
    r = ctx.request
    return predict(ctx.facts, ctx.gpu, layout, mem, isl=r.isl, osl=r.osl,
                   concurrency=None if r.rate is not None else ctx.concurrency, rate=r.rate, params=ctx.params,
                   calibration=ctx.calibration, kv_cache_dtype=ctx.kv_cache_dtype, interconnect=ctx.interconnect,
                   domain=ctx.nvlink_domain, slo_ttft_ms=r.slo_ttft_ms, slo_tpot_ms=r.slo_tpot_ms)


def _cite(rule_id: str, why: str) -> Cited:
    entry = load_knowledge().find(rule_id)
    return Cited(id=rule_id, why=why, attributed=bool(entry and entry.evidence == "attributed-claim"))


def _explain_moe(f: ModelFacts, layout: Layout, reasons: list[Cited], warnings: list[Cited]) -> float:
    """MoE/EP choice rules; appends to reasons/warnings and returns a score penalty."""
    tp, dp = layout.tensor_parallel_size, layout.data_parallel_size
    penalty = 1.0
    moe = f.moe
    if moe is not None:
        density = moe.activation_density
        if layout.enable_expert_parallel:
            reasons.append(_cite(R.C_EP_SIZE, f"experts spread over EP = TP x DP = {layout.expert_parallel_size} "
                                              f"ranks ({moe.num_experts // layout.expert_parallel_size} each)"))
            if density is not None and density < R.EP_MIN_DENSITY:
                warnings.append(_cite(R.C_DENSITY, f"only {density:.2%} of experts are active per token; EP adds "
                                                   "all-to-all traffic with little work to hide it"))
                penalty *= 0.9
            elif density is not None:
                reasons.append(_cite(R.C_DENSITY, f"activation density {density:.2%} is above the "
                                                  f"{R.EP_MIN_DENSITY:.0%} rule of thumb for EP"))
            if f.mla is not None and dp > 1:
                reasons.append(_cite(R.C_MLA_DP_EP, "MLA model: data-parallel attention with expert-parallel MoE "
                                                    "avoids copying the latent KV to every TP rank"))
            if layout.expert_parallel_size >= 16:
                warnings.append(_cite(R.C_EPLB, "EP of 16+ ranks: consider --enable-eplb to balance hot experts"))
        elif density is not None and density >= R.EP_MIN_DENSITY and dp > 1:
            warnings.append(_cite(R.C_DENSITY, f"without EP the experts are sliced over TP x DP = {tp * dp} ranks; "
                                               f"at {density:.2%} activation density EP is reported to win"))
            penalty *= 0.95
    return penalty


def _explain(ctx: _Context, layout: Layout, min_tp_fit: int) -> tuple[list[Cited], list[Cited], float]:
    """(reasons, warnings, multiplicative score penalty) from the choice rules."""
    f, tp, pp, dp = ctx.facts, layout.tensor_parallel_size, layout.pipeline_parallel_size, layout.data_parallel_size
    reasons: list[Cited] = []
    warnings: list[Cited] = []
    penalty = 1.0
    if f.moe is not None and dp > 1:
        reasons.append(_cite(R.C_EP_SIZE, f"attention and dense layers are copied on each of the {dp} DP ranks; "
                                          f"the experts are shared out over all TP x DP = {tp * dp} GPUs"))
    elif tp == 1 and pp == 1:
        reasons.append(_cite(R.C_REPLICAS, f"the model fits one GPU; {dp * layout.replicas} independent "
                                           "replica(s)"))
    elif tp * pp == min_tp_fit:
        reasons.append(_cite(R.C_REPLICAS, f"{tp * pp} GPUs per replica is the smallest split that fits"))
    else:
        reasons.append(_cite(R.C_GOAL, f"more GPUs per replica ({tp * pp}) than needed ({min_tp_fit}): lower "
                                       "per-user latency, fewer replicas"))
    if pp > 1:
        reasons.append(_cite(R.C_TP_PP, f"PP={pp} splits the {f.num_layers} layers into stages "
                                        f"(TP stays inside {ctx.nvlink_domain} GPUs with a fast fabric)"))
        if f.num_layers % pp:
            warnings.append(_cite(R.C_PP_UNEVEN, f"{f.num_layers} layers do not divide by PP={pp}; stages are "
                                                 "unequal and the largest sets the pace"))
    if dp > 1:
        reasons.append(_cite(R.C_GOAL, f"DP={dp} replicas multiply throughput; each keeps its own KV cache"))
    if layout.replicas > 1:
        reasons.append(_cite(R.C_REPLICAS, f"{layout.replicas} independent copies of this command (one per "
                                           f"{tp * pp} GPUs, e.g. via CUDA_VISIBLE_DEVICES) behind a load "
                                           "balancer: no cross-copy traffic"))
    penalty *= _explain_moe(f, layout, reasons, warnings)
    if f.mla is not None and tp > 1:
        warnings.append(_cite(R.C_MLA_KV, f"MLA keeps the full latent KV on each of the {tp} TP ranks"))
    elif f.mla is None and tp > f.num_kv_heads:
        warnings.append(_cite(R.C_KV_REPLICATED, f"TP={tp} > {f.num_kv_heads} KV heads: each KV head is stored "
                                                 f"{tp // f.num_kv_heads} times"))
    if f.model_type == "deepseek_v32" and tp > 1 and f.num_attention_heads // tp < 64:
        warnings.append(_cite(R.C_V32_PAD, f"{f.num_attention_heads // tp} heads per rank are padded to 64 by the "
                                           "sparse-attention kernel; prefer TP 1-2 with DP + EP"))
        penalty *= 0.7
    if ctx.interconnect == "pcie" and tp > 1:
        warnings.append(_cite(R.C_PCIE, f"TP={tp} over PCIe: all-reduces every layer are slow; PP is preferred"))
    return reasons, warnings, penalty


def _rank_key(ctx: _Context, cand: Candidate) -> float:
    goal = ctx.request.goal
    est = cand.estimate
    if est is None:
        per_gpu_kv = cand.memory.kv_tokens_per_replica * cand.data_parallel_size * cand.replicas / cand.gpus_used
        tput = per_gpu_kv
        lat = float(cand.tensor_parallel_size) / cand.pipeline_parallel_size
    else:
        tput = est.output_tokens_per_s_per_gpu
        lat = 1.0 / (est.tpot_ms + est.ttft_ms / max(ctx.request.osl, 1))
    if goal == "throughput":
        return tput
    if goal == "latency":
        return lat
    return math.sqrt(max(tput, 0.0) * max(lat, 0.0))


def _min_fit(ctx: _Context, gpus_used: int) -> int:
    """Smallest TP x PP that fits one replica (ignoring DP), for the 'smallest TP' reason."""
    for n in _divisors(gpus_used):
        for layout in layouts_for(ctx.facts, n):
            if layout.data_parallel_size == 1 and layout.replicas == 1 and _check(ctx, layout)[0] is None:
                return n
    return gpus_used


def _evaluate(ctx: _Context, gpus_used: int) -> tuple[list[Candidate], list[Rejected]]:
    cands: list[Candidate] = []
    rejected: list[Rejected] = []
    min_fit = _min_fit(ctx, gpus_used)
    for layout in layouts_for(ctx.facts, gpus_used):
        violation, mem = _check(ctx, layout)
        if violation is not None:
            rejected.append(Rejected(**layout.model_dump(), rule=violation.rule, why=violation.why))
            continue
        assert mem is not None
        est = _estimate(ctx, layout, mem)
        reasons, warnings, penalty = _explain(ctx, layout, min_fit)
        if est is not None:
            reasons.append(_cite(R.C_ESTIMATE, f"estimate bound by {est.bottleneck}"))
        args = serve_args(layout, max_model_len=ctx.max_model_len, kv_cache_dtype=ctx.kv_cache_dtype,
                          quantization=ctx.online_quantization,
                          gpu_memory_utilization=ctx.request.gpu_memory_utilization)
        command, dropped = render_command(ctx.facts.name, args, ctx.request.vllm_version)
        launch = plan_launch(ctx.facts.name, layout, args, gpus_per_node=ctx.gpus_per_node,
                             vllm_version=ctx.request.vllm_version, head_address=ctx.request.head_address)
        kind: LaunchKind = "single-node"
        nodes: list[NodeCommand] = []
        env: dict[str, str] = {}
        if launch is not None:
            dropped = list(dict.fromkeys([*dropped, *launch.dropped]))
            kind, nodes = launch.kind, launch.nodes
            if nodes:
                command, env = nodes[0].command, nodes[0].env
            reasons.extend(_cite(rule, why) for rule, why in launch.notes)
            warnings.extend(_cite(rule, why) for rule, why in launch.cautions)
            if layout.replicas > 1:
                reasons.append(_cite(R.C_REPLICAS, f"the node commands start one of the {layout.replicas} copies; "
                                                   "repeat them on another set of nodes for each copy"))
        for note in dropped:
            warnings.append(_cite("flag.max-model-len", note))
        cand = Candidate(**layout.model_dump(), rank=0, score=0.0, command=command, env=env, launch=kind,
                         node_commands=nodes, memory=mem, estimate=est, reasons=reasons, warnings=warnings)
        score = _rank_key(ctx, cand) * penalty
        if est is not None and est.meets_slo is False:
            score *= SLO_MISS_PENALTY
        cands.append(cand.model_copy(update={"score": score}))
    cands = order_for_goal(cands, ctx.request.goal, _margin(ctx))
    return [c.model_copy(update={"rank": i + 1}) for i, c in enumerate(cands)], rejected


def _margin(ctx: _Context) -> float:
    """The estimator's p90 error: an estimated gain smaller than it does not overturn the measured rule that a
    model fitting one GPU serves throughput best as TP1 replicas."""
    r = ctx.params.residuals
    return r.p90 if r is not None else 0.5


def _any_fit(request: PlanInput, facts: ModelFacts, **update: object) -> bool:
    try:
        ctx = _context(request.model_copy(update=update), facts)
    except BadInputError:
        return False
    return any(_check(ctx, layout)[0] is None for layout in layouts_for(ctx.facts, ctx.request.gpus))


def _what_would_fit(request: PlanInput, raw: ModelFacts, ctx: _Context) -> list[str]:
    tips: list[str] = []
    for n in sorted({2 ** k for k in range(13)} | {ctx.gpus_per_node * k for k in range(1, 65)}):
        if n <= request.gpus or n > 4096:
            continue
        if _any_fit(request, raw, gpus=n):
            tips.append(f"{n} x {ctx.gpu.name} GPUs would fit")
            break
    if raw.quant.quant_method is None and request.quantization is None and _any_fit(request, raw,
                                                                                      quantization="fp8"):
        tips.append(f"FP8 weights (--quantization fp8) would fit on {request.gpus} GPUs")
    if request.kv_cache_dtype == "auto" and _any_fit(request, raw, kv_cache_dtype="fp8"):
        tips.append(f"an FP8 KV cache (--kv-cache-dtype fp8) would fit on {request.gpus} GPUs")
    need = request.isl + request.osl
    length = ctx.max_model_len // 2
    while length >= max(need, 256):
        if _any_fit(request, raw, max_model_len=length):
            tips.append(f"--max-model-len {length} would fit on {request.gpus} GPUs")
            break
        length //= 2
    if not tips:
        tips.append("no tried change fits: use a GPU with more memory or a smaller/quantized checkpoint")
    return tips


def recommend_parallelism(request: PlanInput, *, facts: ModelFacts | None = None) -> PlanOutput:
    """Valid, ranked, explained layouts for serving a model on N GPUs; rejected layouts with the rule."""
    raw = facts or resolve_model(request.model, revision=request.revision, offline=request.offline)
    ctx = _context(request, raw)
    warnings = list(ctx.notes)
    used = request.gpus
    cands, rejected = _evaluate(ctx, used)
    while not cands and used > 1:
        used -= 1
        more_cands, more_rej = _evaluate(ctx, used)
        if more_cands:
            cands = more_cands
            warnings.append(f"no layout uses all {request.gpus} GPUs; these use {used}")
            rejected.extend(more_rej)
    if ctx.facts.source == "catalog" and not ctx.facts.status.startswith("verified"):
        warnings.append(f"catalog facts for {ctx.facts.name} are {ctx.facts.status}")
    if ctx.gpu.bandwidth_tbs is None or not ctx.gpu.tflops:
        warnings.append(f"{ctx.gpu.name} has no bandwidth/FLOPS facts in the catalog: no performance estimate; "
                        "ranking uses KV capacity and TP size only")
    nodes = math.ceil(request.gpus / ctx.gpus_per_node)
    why = why_first(cands, request.goal, _margin(ctx))
    top = cands[: request.top]
    if request.estimator != "builtin" and top:
        from vllm_tune.tools.parallel.peer import aic_estimates

        peers, note = aic_estimates(ctx.facts, ctx.gpu, top, isl=request.isl, osl=request.osl)
        top = [c.model_copy(update={"peer_estimate": pe}) for c, pe in zip(top, peers, strict=True)]
        if note:
            warnings.append(note)
    feasible = bool(cands)
    what = [] if feasible else _what_would_fit(request, raw, ctx)
    if feasible:
        best = top[0]
        summary = (f"{best.label()} on {best.gpus_used} x {ctx.gpu.name} for {request.goal}: "
                   f"{best.memory.kv_tokens_per_replica} KV tokens per replica")
        if best.estimate is not None:
            summary += (f", est. TPOT {best.estimate.tpot_ms:.1f} ms, TTFT {best.estimate.ttft_ms:.0f} ms, "
                        f"{best.estimate.output_tokens_per_s_per_gpu:.0f} output tok/s/GPU (estimate)")
    else:
        summary = f"nothing fits {ctx.facts.name} on {request.gpus} x {ctx.gpu.name}: " + "; ".join(what)
    rejected.sort(key=lambda r: (r.gpus_used != request.gpus, r.tensor_parallel_size, r.pipeline_parallel_size))
    return PlanOutput(
        feasible=feasible, summary=summary, model=ctx.facts, hardware=ctx.gpu, gpus=request.gpus,
        gpus_per_node=ctx.gpus_per_node, nodes=nodes,
        workload={"isl": request.isl, "osl": request.osl, "concurrency": request.concurrency, "rate": request.rate,
                  "assumed_concurrency": ctx.concurrency if request.rate is None and request.concurrency is None
                  else None,
                  "goal": request.goal, "max_model_len": ctx.max_model_len, "kv_cache_dtype": ctx.kv_cache_dtype,
                  "slo_ttft_ms": request.slo_ttft_ms, "slo_tpot_ms": request.slo_tpot_ms},
        assumptions=[f"max model length {ctx.max_model_len} (always passed as --max-model-len)",
                     f"gpu_memory_utilization {request.gpu_memory_utilization}",
                     *MEMORY_ASSUMPTIONS, *estimate_assumptions(ctx.params)],
        candidates=top, rejected=rejected[:MAX_REJECTED_SHOWN], rejected_total=len(rejected),
        what_would_fit=what, warnings=warnings, ranking_why=why,
    )
