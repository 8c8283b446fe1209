"""Model and GPU facts shared by the planners (parallelism, MoE tuning)."""

from vllm_tune.tools.models.catalog import catalog_model_ids, custom_gpu, get_gpu, gpu_names
from vllm_tune.tools.models.config_parse import facts_from_config, quant_info
from vllm_tune.tools.models.facts import (
    GpuSpec,
    Interconnect,
    MlaShape,
    ModelFacts,
    MoeShape,
    QuantInfo,
    WeightBreakdown,
    kv_dtype_bytes,
)
from vllm_tune.tools.models.resolve import resolve_model

__all__ = [
    "GpuSpec",
    "Interconnect",
    "MlaShape",
    "ModelFacts",
    "MoeShape",
    "QuantInfo",
    "WeightBreakdown",
    "catalog_model_ids",
    "custom_gpu",
    "facts_from_config",
    "get_gpu",
    "gpu_names",
    "kv_dtype_bytes",
    "quant_info",
    "resolve_model",
]
