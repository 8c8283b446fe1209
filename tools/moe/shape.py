"""From a model, a parallel layout, a GPU and a dtype to the exact config key vLLM will look up."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.naming import (
    ConfigKey,
    LayerShape,
    check_block_shape,
    config_dtype,
    layer_shape,
    normalize_device_name,
)
from vllm_tune.tools.moe.search_space import TuneShape


@dataclass
class ResolvedGpu:
    label: str
    full_name: str
    device_name: str
    in_catalog: bool


def resolve_gpu(name: str) -> ResolvedGpu:
    """A catalog GPU (H100, H200, MI300X...) or, failing that, a raw torch device name such as 'NVIDIA GB10'."""
    from vllm_tune.tools.models import get_gpu

    try:
        spec = get_gpu(name)
    except BadInputError:
        raw = name.strip()
        if not raw or not any(ch in raw for ch in " _-") or not raw[:1].isupper():
            raise
        return ResolvedGpu(raw, raw, normalize_device_name(raw), False)
    full = spec.full_name or spec.vllm_config_device_name or spec.name
    return ResolvedGpu(spec.name, full, normalize_device_name(full), True)


@dataclass
class DtypeChoice:
    selector: str | None
    block_shape: tuple[int, int] | None
    notes: list[str] = field(default_factory=list)


def dtype_from_checkpoint(quant_method: str | None, block: list[int] | None) -> DtypeChoice:
    """The MoE dtype selector a checkpoint's quantization most likely yields (override with an explicit dtype)."""
    method = (quant_method or "").lower()
    blk = (int(block[0]), int(block[1])) if block and len(block) == 2 else None
    if not method:
        return DtypeChoice(None, None)
    if method in ("fp8", "fbgemm_fp8"):
        return DtypeChoice("fp8_w8a8", blk)
    if method in ("awq", "gptq", "int4"):
        return DtypeChoice("int4_w4a16", None, [
            f"{method} MoE weights usually run through Marlin or other non-Triton kernels that read no tuned "
            "config; the name applies only when the Triton int4_w4a16 path is used"])
    if method in ("mxfp4",):
        return DtypeChoice(None, None, ["MXFP4 (OCP MX) weights carry no dtype selector in the file name"])
    if method in ("w8a8", "int8"):
        return DtypeChoice("int8_w8a8", blk)
    return DtypeChoice(None, blk, [f"cannot tell the MoE dtype selector for quantization {method!r}; "
                                   "pass --dtype (fp8_w8a8, int8_w8a16, ...)"])


@dataclass
class ResolvedShape:
    model: str
    key: ConfigKey
    layer: LayerShape
    tune_shape: TuneShape
    gpu: ResolvedGpu
    notes: list[str]


def resolve_shape(*, model: str, gpu: str, tp: int, dp: int, ep: bool, dtype: str | None,
                  offline: bool = False) -> ResolvedShape:
    from vllm_tune.tools.models import resolve_model

    facts = resolve_model(model, offline=offline)
    if facts.moe is None:
        raise BadInputError(f"{facts.name} has no MoE layers; fused-MoE configs only matter for MoE models")
    moe = facts.moe
    if not moe.moe_intermediate_size:
        raise BadInputError(f"{facts.name}: the config gives no per-expert intermediate size")
    notes: list[str] = []
    if dtype is not None and dtype.strip().lower() not in ("", "auto"):
        choice = DtypeChoice(config_dtype(dtype), None)
        if facts.quant.weight_block_size and choice.selector in ("fp8_w8a8", "int8_w8a8"):
            b = facts.quant.weight_block_size
            choice.block_shape = (int(b[0]), int(b[1]))
    else:
        choice = dtype_from_checkpoint(facts.quant.quant_method, facts.quant.weight_block_size)
        if facts.quant.quant_method is None and facts.torch_dtype in ("float32", "fp32"):
            choice = DtypeChoice("float32", None)
    notes.extend(choice.notes)
    layer = layer_shape(num_experts=moe.num_experts, intermediate_size=moe.moe_intermediate_size, tp=tp, dp=dp,
                        enable_ep=ep)
    notes.extend(check_block_shape(choice.block_shape, layer))
    if ep and tp * dp == 1:
        notes.append("--enable-expert-parallel with TP x DP = 1 changes nothing: vLLM only uses EP when TP x DP > 1")
    if moe.num_shared_experts:
        notes.append(f"{moe.num_shared_experts} shared expert(s) run as a dense MLP and are not part of this shape")
    resolved_gpu = resolve_gpu(gpu)
    key = ConfigKey(E=layer.local_experts, N=layer.intermediate_per_rank, device_name=resolved_gpu.device_name,
                    dtype=choice.selector, block_shape=choice.block_shape)
    tune_shape = TuneShape(E=key.E, N=key.N, hidden_size=facts.hidden_size, top_k=moe.top_k or 2,
                           dtype=key.dtype, block_shape=key.block_shape)
    if moe.top_k is None:
        notes.append("the config does not give top-k; tuning assumes 2")
    return ResolvedShape(facts.name, key, layer, tune_shape, resolved_gpu, notes)
