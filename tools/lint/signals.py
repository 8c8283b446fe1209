"""Derived quantities of a serving configuration, named like the diagnose signals so one engine reads both.

Pitfall entries in the knowledge base carry conditions on these names (`signals:`); tools/lint/api.py
evaluates them with the same engine that evaluates triage rules on /metrics. A quantity that needs facts
we do not have (the model's architecture, the GPU) is left out, so rules that need it are reported as not
checked instead of guessed. Booleans are 1/0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_tune.tools.diagnose.signals import SignalSet
from vllm_tune.tools.lint.parse import ServeConfig
from vllm_tune.tools.models.facts import ModelFacts

LINT_SIGNAL_DOCS: dict[str, str] = {
    "tp_size": "--tensor-parallel-size (1 when not given)",
    "pp_size": "--pipeline-parallel-size (1 when not given)",
    "dp_size": "--data-parallel-size (1 when not given)",
    "heads_mod_tp": "attention heads modulo the TP size (model facts)",
    "ep_enabled": "1 when --enable-expert-parallel is on",
    "ep_size": "expert-parallel group size, TP x DP, when expert parallelism is on",
    "experts_mod_ep": "routed experts modulo the EP size (model facts)",
    "ep_over_experts": "EP size / routed experts (model facts)",
    "is_moe": "1 for a mixture-of-experts model (model facts)",
    "moe_density_pct": "experts used per token / routed experts, in percent (model facts)",
    "eplb_enabled": "1 when --enable-eplb is on",
    "is_mla": "1 for a multi-head latent attention model (model facts)",
    "fp8_block_misaligned": "1 when a block-FP8 checkpoint's per-rank intermediate size is not a multiple of the "
                            "block (model facts)",
    "executor_ray": "1 when --distributed-executor-backend is ray",
    "multi_node": "1 when the command spans nodes (--nnodes > 1, a data-parallel address, --headless, or the "
                  "nodes given); 0 when nothing says so",
    "nccl_cumem_disabled": "1 when NCCL_CUMEM_ENABLE=0 is set",
    "gpu_gb200_class": "1 on GB200/GB300 (only when the GPU is given)",
    "gpu_h200": "1 on H200 (only when the GPU is given)",
    "chunked_prefill_disabled": "1 when chunked prefill is switched off",
    "batched_tokens_over_max_model_len": "--max-num-batched-tokens / max model length (both must be known)",
    "enforce_eager": "1 when --enforce-eager is on",
    "device_cpu": "1 when the target device is cpu (--device cpu or --gpu cpu); 0 when a GPU or not given",
    "async_scheduling_disabled": "1 when async scheduling is switched off explicitly",
    "hybrid_kv_manager_disabled": "1 when --disable-hybrid-kv-cache-manager is on",
    "trust_remote_code": "1 when --trust-remote-code is on",
    "detailed_traces": "1 when --collect-detailed-traces is set",
    "deep_gemm_moe_forced": "1 when VLLM_MOE_USE_DEEP_GEMM=1 is set",
    "fp8_weights": "1 when the checkpoint stores FP8 weights (model facts)",
    "vllm_port_env": "1 when VLLM_PORT is set (an internal setting, not the API port)",
    "hf_offline": "1 when HF_HUB_OFFLINE=1 is set",
    "kv_cache_fp8": "1 when --kv-cache-dtype is an FP8 type",
    "cpu_offload_gb": "--cpu-offload-gb (0 when not given)",
    "kv_offloading_given": "1 when --kv-offloading-size is set",
    "gpu_memory_utilization": "--gpu-memory-utilization, when given",
}


@dataclass
class Context:
    model: ModelFacts | None
    gpu: str | None
    nodes: int | None
    device: str | None = None


def _flag(cfg: ServeConfig, dest: str) -> bool:
    return cfg.get(dest) is True or str(cfg.get(dest)).lower() == "true"


def _int(cfg: ServeConfig, dest: str, default: int) -> int:
    value = cfg.get(dest)
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError, OverflowError):
        return default


def _size(cfg: ServeConfig, dest: str) -> int:
    """A parallel size: a whole number of at least 1 (vLLM refuses anything else, reported as a bad value), so
    nothing downstream divides by zero or by a fraction."""
    value = cfg.get(dest)
    if isinstance(value, bool):
        return 1
    if isinstance(value, float) and not value.is_integer():
        return 1
    n = _int(cfg, dest, 1)
    return n if n >= 1 else 1


def _float(cfg: ServeConfig, dest: str) -> float | None:
    value = cfg.get(dest)
    try:
        out = float(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None
    return out if out is None or math.isfinite(out) else None


def _bool(value: bool) -> float:
    return 1.0 if value else 0.0


def _parallel(cfg: ServeConfig, out: SignalSet, ctx: Context) -> None:
    tp, pp, dp = _size(cfg, "tensor_parallel_size"), _size(cfg, "pipeline_parallel_size"), \
        _size(cfg, "data_parallel_size")
    out.put("tp_size", tp, "--tensor-parallel-size")
    out.put("pp_size", pp, "--pipeline-parallel-size")
    out.put("dp_size", dp, "--data-parallel-size")
    ep = _flag(cfg, "enable_expert_parallel")
    out.put("ep_enabled", _bool(ep), "--enable-expert-parallel")
    if ep:
        out.put("ep_size", tp * dp, "TP x DP (vLLM's expert-parallel group)")
    out.put("eplb_enabled", _bool(_flag(cfg, "enable_eplb")), "--enable-eplb")
    out.put("executor_ray", _bool(str(cfg.get("distributed_executor_backend") or "").lower() == "ray"),
            "--distributed-executor-backend")
    spans = (_int(cfg, "nnodes", 1) > 1 or cfg.given("data_parallel_address") or _flag(cfg, "headless")
             or (ctx.nodes or 1) > 1)
    out.put("multi_node", _bool(spans), "--nnodes, --data-parallel-address, --headless or the nodes given")
    m = ctx.model
    if m is None:
        return
    out.put("heads_mod_tp", m.num_attention_heads % tp, f"{m.num_attention_heads} heads % TP {tp}")
    out.put("is_moe", _bool(m.moe is not None), f"{m.name} architecture")
    out.put("is_mla", _bool(m.attention == "mla"), f"{m.name} attention: {m.attention}")
    out.put("fp8_weights", _bool(m.quant.weight_dtype.startswith("fp8")), f"{m.name} weights: {m.quant.weight_dtype}")
    if m.moe is not None:
        if m.moe.activation_density is not None:
            out.put("moe_density_pct", 100.0 * m.moe.activation_density,
                    f"top_k {m.moe.top_k} / {m.moe.num_experts} experts")
        if ep and m.moe.num_experts > 0:
            out.put("experts_mod_ep", m.moe.num_experts % (tp * dp), f"{m.moe.num_experts} experts % EP {tp * dp}")
            out.put("ep_over_experts", tp * dp / m.moe.num_experts, f"EP {tp * dp} / {m.moe.num_experts} experts")
    block = m.quant.weight_block_size
    if block and block[0] > 0 and m.quant.weight_dtype.startswith("fp8"):
        # Expert parallelism keeps each expert whole on its rank; TP shards dense and (without EP) expert MLPs.
        shards = [(m.intermediate_size, tp)] if m.intermediate_size else []
        if m.moe is not None and m.moe.moe_intermediate_size:
            shards.append((m.moe.moe_intermediate_size, 1 if ep else tp))
        bad = [f"{size}/{n}" for size, n in shards if size % n or (size // n) % block[0]]
        out.put("fp8_block_misaligned", _bool(bool(bad)),
                f"per-rank intermediate sizes against block {block[0]}: "
                + (", ".join(bad) + " not a multiple" if bad else "all multiples"))


def _runtime(cfg: ServeConfig, out: SignalSet, ctx: Context) -> None:
    env = cfg.env
    out.put("nccl_cumem_disabled", _bool(env.get("NCCL_CUMEM_ENABLE") == "0"), "environment")
    out.put("deep_gemm_moe_forced", _bool(env.get("VLLM_MOE_USE_DEEP_GEMM") == "1"), "environment")
    out.put("vllm_port_env", _bool("VLLM_PORT" in env), "environment")
    out.put("hf_offline", _bool(env.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")), "environment")
    if ctx.gpu:
        name = ctx.gpu.lower()
        out.put("gpu_gb200_class", _bool("gb200" in name or "gb300" in name), f"GPU {ctx.gpu}")
        out.put("gpu_h200", _bool("h200" in name), f"GPU {ctx.gpu}")
    chunked = cfg.get("enable_chunked_prefill")
    out.put("chunked_prefill_disabled", _bool(chunked is False or str(chunked).lower() == "false"),
            "--enable-chunked-prefill")
    mbt = _float(cfg, "max_num_batched_tokens")
    mml = _float(cfg, "max_model_len")
    how = "--max-model-len"
    if mml is None and ctx.model is not None:
        mml, how = float(ctx.model.max_position_embeddings), "the model's max_position_embeddings"
    if mbt is not None and mml:
        out.put("batched_tokens_over_max_model_len", mbt / mml, f"--max-num-batched-tokens / {how}")
    out.put("enforce_eager", _bool(_flag(cfg, "enforce_eager")), "--enforce-eager")
    # Unknown means a GPU: that is what vLLM serves on in production and what the pitfalls were written for.
    out.put("device_cpu", _bool(ctx.device == "cpu"), f"device {ctx.device}" if ctx.device else "no device given")
    asyn = cfg.get("async_scheduling")
    out.put("async_scheduling_disabled", _bool(asyn is False or str(asyn).lower() == "false"), "--async-scheduling")
    out.put("hybrid_kv_manager_disabled", _bool(_flag(cfg, "disable_hybrid_kv_cache_manager")),
            "--disable-hybrid-kv-cache-manager")
    out.put("trust_remote_code", _bool(_flag(cfg, "trust_remote_code")), "--trust-remote-code")
    out.put("detailed_traces", _bool(cfg.get("collect_detailed_traces") not in (None, "", "None")),
            "--collect-detailed-traces")
    out.put("kv_cache_fp8", _bool(str(cfg.get("kv_cache_dtype") or "").startswith("fp8")), "--kv-cache-dtype")
    out.put("cpu_offload_gb", _float(cfg, "cpu_offload_gb") or 0.0, "--cpu-offload-gb")
    out.put("kv_offloading_given", _bool(cfg.get("kv_offloading_size") not in (None, "", "None")),
            "--kv-offloading-size")
    gmu = _float(cfg, "gpu_memory_utilization")
    if gmu is not None:
        out.put("gpu_memory_utilization", gmu, "--gpu-memory-utilization")


def config_signals(cfg: ServeConfig, ctx: Context) -> SignalSet:
    out = SignalSet()
    _parallel(cfg, out, ctx)
    _runtime(cfg, out, ctx)
    return out
