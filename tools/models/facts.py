"""Typed facts about a model checkpoint and a GPU, shared by the parallelism planner and the MoE tuner."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vllm_tune.tools.errors import BadInputError

ModelSource = Literal["catalog", "local", "hub"]
AttentionKind = Literal["mha", "gqa", "mqa", "mla"]

# Bytes per stored element for KV-cache dtypes as vLLM names them (--kv-cache-dtype).
KV_DTYPE_BYTES: dict[str, float] = {
    "auto": 2.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "half": 2.0,
    "float32": 4.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
    "fp8_ds_mla": 1.0,
}


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MoeShape(_Frozen):
    """Mixture-of-experts shape; sizes are whole-model values before any TP/EP sharding."""

    num_experts: int = Field(description="routed experts per MoE layer")
    top_k: int | None = Field(description="experts activated per token (None when the config does not say)")
    moe_intermediate_size: int | None = Field(description="per-expert intermediate size N before TP sharding")
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int | None = None
    num_dense_layers: int = Field(description="decoder layers with a dense MLP instead of experts")
    num_moe_layers: int

    @property
    def activation_density(self) -> float | None:
        """Fraction of routed experts each token uses (top_k / experts)."""
        if self.top_k is None or self.num_experts <= 0:
            return None
        return self.top_k / self.num_experts


class MlaShape(_Frozen):
    """Multi-head latent attention dimensions (DeepSeek-V2/V3 style)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    q_lora_rank: int | None = None


class QuantInfo(_Frozen):
    """How the checkpoint's weights are stored."""

    quant_method: str | None = Field(default=None, description="quantization_config.quant_method, None = unquantized")
    weight_dtype: str = Field(description="storage dtype of the quantized linear weights, e.g. bfloat16, fp8, mxfp4")
    weight_block_size: list[int] | None = Field(default=None, description="[block_n, block_k] for block-wise FP8")
    bytes_per_param: float = Field(description="average bytes per quantized weight, including scales")
    attention_unquantized: bool = Field(default=False, description="attention weights kept at 16 bits")


class WeightBreakdown(_Frozen):
    """Stored weight bytes by part, from the architecture (scaled to the index size when one is known)."""

    embedding_bytes: int
    lm_head_bytes: int = Field(description="0 when tied to the embedding")
    attention_bytes_per_layer: int
    dense_mlp_bytes_per_layer: int = Field(description="MLP of a dense (non-MoE) layer")
    moe_shared_bytes_per_layer: int = Field(description="shared experts + router of one MoE layer")
    expert_bytes: int = Field(description="one routed expert of one MoE layer")


class ModelFacts(_Frozen):
    """Architecture facts the planner needs, from a catalog entry, a local config.json or the hub."""

    name: str
    source: ModelSource
    status: str = Field(default="", description="how far the facts were verified (catalog) or where they were read")
    architecture: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int | None
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    attention: AttentionKind
    mla: MlaShape | None = None
    sliding_window: int | None = Field(default=None, description="window of the sliding-window layers, if any")
    num_sliding_layers: int = Field(default=0, description="layers whose KV is bounded by sliding_window")
    num_linear_attention_layers: int = Field(default=0, description="linear/recurrent layers with no per-token KV")
    moe: MoeShape | None = None
    quant: QuantInfo
    torch_dtype: str
    params_total: int = Field(description="parameters excluding MTP/draft layers")
    params_active: int = Field(description="parameters used per token (MoE: shared parts + top_k experts)")
    params_computed: bool = Field(description="True when counted from the architecture, False when reported")
    checkpoint_bytes: int
    weights: WeightBreakdown | None = Field(default=None, description="None when the architecture is incomplete")
    checkpoint_bytes_source: Literal["index", "files", "computed", "reported-params"]
    sources: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def num_full_attention_layers(self) -> int:
        return self.num_layers - self.num_sliding_layers - self.num_linear_attention_layers

    def kv_bytes_per_token_per_layer(self, kv_dtype: str = "auto") -> float:
        """KV bytes one token occupies in one attention layer, unsharded (MLA: the latent vector)."""
        elem = kv_dtype_bytes(kv_dtype, self.torch_dtype)
        if self.mla is not None:
            return (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim) * elem
        return 2 * self.num_kv_heads * self.head_dim * elem

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> float:
        """KV bytes per token over the layers whose KV grows with sequence length (full attention).

        Sliding-window layers hold at most `sliding_window` tokens per sequence and linear-attention layers a
        constant state; neither is counted here.
        """
        return self.kv_bytes_per_token_per_layer(kv_dtype) * self.num_full_attention_layers


def kv_dtype_bytes(kv_dtype: str, model_dtype: str = "bfloat16") -> float:
    """Bytes per KV element; 'auto' follows the model dtype."""
    key = kv_dtype.strip().lower()
    if key == "auto":
        return 4.0 if model_dtype in ("float32", "fp32") else 2.0
    if key not in KV_DTYPE_BYTES:
        known = ", ".join(sorted(KV_DTYPE_BYTES))
        raise BadInputError(f"unknown KV-cache dtype {kv_dtype!r}; known: {known}")
    return KV_DTYPE_BYTES[key]


InterconnectKind = Literal["nvlink", "pcie", "xgmi", "unknown"]


class Interconnect(_Frozen):
    kind: InterconnectKind
    description: str | None = None
    bandwidth_gbs: float | None = Field(default=None, description="per GPU, bidirectional GB/s")


class GpuSpec(_Frozen):
    """One accelerator type; catalog entries carry their sources, custom ones say 'user-supplied'."""

    name: str
    full_name: str | None = Field(default=None, description="the device name torch/NVML prints, when known")
    vendor: Literal["nvidia", "amd", "other"]
    memory_gib: float = Field(gt=0)
    memory_estimated: bool = Field(default=False, description="memory_gib derived from the labelled GB")
    bandwidth_tbs: float | None = Field(default=None, gt=0)
    tflops: dict[str, float] = Field(default_factory=dict, description="dense peaks per dtype: bf16, fp8, fp4")
    interconnect: Interconnect
    gpus_per_node: int = Field(default=8, ge=1)
    vllm_config_device_name: str | None = None
    sources: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    def tflops_for(self, dtype: str) -> float | None:
        """Dense peak for a compute dtype, falling back to bf16 when the faster dtype is unknown."""
        return self.tflops.get(dtype) or self.tflops.get("bf16")
