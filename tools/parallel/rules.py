"""Validity rules for a parallel layout. Each rule is a knowledge-base entry; the id is what we cite."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_tune.tools.models.facts import ModelFacts
from vllm_tune.tools.parallel.io import Layout

# Validity rules (a layout that breaks one is rejected).
R_HEADS = "pitfall.tp-not-dividing-heads"
R_KV_DIVIDE = "parallelism.kv-heads-tp-divisible"
R_FP8_BLOCK = "pitfall.fp8-block-tp-cap"
R_MOE_TP_SPANS_DP = "parallelism.moe-tp-spans-dp"
R_EP_NEEDS_MOE = "parallelism.ep-requires-moe"
R_EP_DIVIDES = "pitfall.moe-experts-not-divisible"
R_PP_LAYERS = "parallelism.pp-needs-layers"
R_TP_NODE = "parallelism.tp-within-node"
R_MEMORY = "parallelism.memory-fits"
R_WORLD = "parallelism.world-size"

# Choice rules and warnings (they rank and explain, they do not reject).
C_REPLICAS = "distributed.smallest-tp-then-replicas"
C_TP_PP = "distributed.tp-inside-pp-across"
C_EP_SIZE = "distributed.ep-size-equals-tp-dp"
C_DENSITY = "pitfall.ep-low-activation-density"
C_MLA_KV = "pitfall.mla-high-tp-replicates-kv"
C_MLA_DP_EP = "parallelism.mla-moe-dp-attention-ep"
C_V32_PAD = "pitfall.deepseek-v32-tp8"
C_PCIE = "hardware.pcie-no-nvlink"
C_KV_REPLICATED = "parallelism.kv-heads-replicated"
C_GOAL = "parallelism.goal-latency-tp-throughput-dp"
C_ESTIMATE = "parallelism.roofline-estimate"
C_EPLB = "pitfall.no-eplb-at-scale"
C_PP_UNEVEN = "parallelism.pp-uneven-layers"

ALL_RULE_IDS = (R_HEADS, R_KV_DIVIDE, R_FP8_BLOCK, R_MOE_TP_SPANS_DP, R_EP_NEEDS_MOE, R_EP_DIVIDES, R_PP_LAYERS,
                R_TP_NODE, R_MEMORY, R_WORLD, C_REPLICAS, C_TP_PP, C_EP_SIZE, C_DENSITY, C_MLA_KV, C_MLA_DP_EP,
                C_V32_PAD, C_PCIE, C_KV_REPLICATED, C_GOAL, C_ESTIMATE, C_EPLB, C_PP_UNEVEN)

# Below this share of routed experts per token, EP is not proposed (attributed claim, see C_DENSITY).
EP_MIN_DENSITY = 0.02


@dataclass(frozen=True)
class Violation:
    rule: str
    why: str


def moe_tp_size(layout: Layout) -> int:
    """How many ways each expert's weights are split: 1 with EP, else the whole TP x DP group."""
    if layout.enable_expert_parallel:
        return 1
    return layout.tensor_parallel_size * layout.data_parallel_size


def _block_violation(size: int | None, parts: int, block: int, what: str) -> Violation | None:
    if size is None or parts <= 1:
        return None
    if size % parts:
        return Violation(R_FP8_BLOCK, f"{what} {size} does not split evenly over {parts} ranks")
    if (size // parts) % block:
        return Violation(R_FP8_BLOCK, f"{what} {size}/{parts} = {size // parts} per rank is not a multiple of the "
                                      f"FP8 weight block {block}")
    return None


def structural_violations(facts: ModelFacts, layout: Layout, *, nvlink_domain: int) -> list[Violation]:
    """Every validity rule except memory, in the order vLLM would hit them."""
    tp, pp, dp = layout.tensor_parallel_size, layout.pipeline_parallel_size, layout.data_parallel_size
    out: list[Violation] = []
    if tp * pp * dp * layout.replicas != layout.gpus_used:
        out.append(Violation(R_WORLD, f"TP x PP x DP x replicas = {tp * pp * dp * layout.replicas} but "
                                      f"{layout.gpus_used} GPUs are used"))
    if facts.num_attention_heads % tp:
        out.append(Violation(R_HEADS, f"{facts.num_attention_heads} attention heads do not divide by TP={tp}"))
    kv = facts.num_kv_heads
    if facts.mla is None and kv % tp and tp % kv:
        out.append(Violation(R_KV_DIVIDE, f"{kv} KV heads and TP={tp}: neither divides the other"))
    if tp > nvlink_domain:
        out.append(Violation(R_TP_NODE, f"TP={tp} spans more than the {nvlink_domain} GPUs that share a fast fabric"))
    if pp > facts.num_layers:
        out.append(Violation(R_PP_LAYERS, f"PP={pp} exceeds the {facts.num_layers} decoder layers"))
    moe = facts.moe
    if layout.enable_expert_parallel:
        if moe is None:
            out.append(Violation(R_EP_NEEDS_MOE, "expert parallelism on a model without experts"))
        elif moe.num_experts % layout.expert_parallel_size:
            out.append(Violation(R_EP_DIVIDES, f"{moe.num_experts} experts do not divide over EP="
                                               f"{layout.expert_parallel_size}"))
    block = facts.quant.weight_block_size
    if block and facts.quant.weight_dtype == "fp8":
        block_n = block[0]
        checks = [(facts.intermediate_size if (moe is None or moe.num_dense_layers) else None, tp,
                   "dense MLP intermediate size")]
        if moe is not None:
            mtp = moe_tp_size(layout)
            checks.append((moe.moe_intermediate_size, mtp, "expert intermediate size"))
            if moe.num_shared_experts:
                checks.append((moe.shared_expert_intermediate_size or moe.moe_intermediate_size, tp,
                               "shared-expert intermediate size"))
        for size, parts, what in checks:
            found = _block_violation(size, parts, block_n, what)
            if found is not None:
                if what == "expert intermediate size" and dp > 1 and parts == tp * dp:
                    found = Violation(R_MOE_TP_SPANS_DP, found.why + f" (without EP the experts are split over "
                                                                     f"TP x DP = {parts} ranks)")
                out.append(found)
                break
    return out
