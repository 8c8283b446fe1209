"""Turn a Hugging Face config.json (any of the key spellings popular checkpoints use) into ModelFacts."""

from __future__ import annotations

from typing import Any

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.models.facts import (
    AttentionKind,
    MlaShape,
    ModelFacts,
    ModelSource,
    MoeShape,
    QuantInfo,
    WeightBreakdown,
)

# Average stored bytes per quantized weight, scales included (MXFP4: 4-bit values + one 8-bit scale per 32).
_QUANT_BYTES: dict[str, tuple[str, float]] = {
    "fp8": ("fp8", 1.0),
    "fbgemm_fp8": ("fp8", 1.0),
    "modelopt": ("fp8", 1.0),
    "compressed-tensors": ("int8-or-fp8", 1.0),
    "w8a8": ("int8", 1.0),
    "int8": ("int8", 1.0),
    "mxfp4": ("mxfp4", 4.25 / 8),
    "nvfp4": ("nvfp4", 4.5 / 8),
    "modelopt_fp4": ("nvfp4", 4.5 / 8),
    "fp4": ("nvfp4", 4.5 / 8),
    "awq": ("int4", 0.5 + 1 / 64),
    "gptq": ("int4", 0.5 + 1 / 64),
    "int4": ("int4", 0.5 + 1 / 64),
    "bitsandbytes": ("int4", 0.5 + 1 / 64),
}
_FLOAT_BYTES = {"bfloat16": 2.0, "float16": 2.0, "half": 2.0, "float32": 4.0, "fp32": 4.0, "float": 4.0}


def quant_info(quant_method: str | None, torch_dtype: str, block: list[int] | None = None,
               unquantized_modules: list[str] | None = None) -> QuantInfo:
    """QuantInfo for a quantization method name (None = weights stored in torch_dtype)."""
    if quant_method is None:
        nbytes = _FLOAT_BYTES.get(torch_dtype, 2.0)
        return QuantInfo(quant_method=None, weight_dtype=torch_dtype, bytes_per_param=nbytes)
    key = quant_method.strip().lower()
    if key in _FLOAT_BYTES:
        return QuantInfo(quant_method=None, weight_dtype=key, bytes_per_param=_FLOAT_BYTES[key])
    if key not in _QUANT_BYTES:
        known = ", ".join(sorted(_QUANT_BYTES))
        raise BadInputError(f"unknown quantization {quant_method!r}; known: {known}")
    dtype, nbytes = _QUANT_BYTES[key]
    attn_kept = any("self_attn" in m or m == "attn" for m in unquantized_modules or [])
    return QuantInfo(quant_method=key, weight_dtype=dtype, weight_block_size=block, bytes_per_param=nbytes,
                     attention_unquantized=attn_kept)


def _int(cfg: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    return None


def _require(value: int | None, what: str, name: str) -> int:
    if value is None or value <= 0:
        raise BadInputError(f"model {name}: config.json has no usable {what}")
    return value


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal checkpoints (Llama 4, Gemma 3) nest the language model under text_config."""
    text = cfg.get("text_config")
    if isinstance(text, dict):
        merged = {k: v for k, v in cfg.items() if k != "text_config"}
        merged.update(text)
        return merged
    return cfg


def _moe_layers(cfg: dict[str, Any], num_layers: int, has_moe: bool) -> tuple[int, int]:
    """(dense layers, MoE layers) from the family-specific layer-placement keys."""
    if not has_moe:
        return num_layers, 0
    first_dense = _int(cfg, "first_k_dense_replace")
    if first_dense is not None:
        freq = _int(cfg, "moe_layer_freq") or 1
        moe = sum(1 for i in range(first_dense, num_layers) if i % freq == 0)
        return num_layers - moe, moe
    step = _int(cfg, "interleave_moe_layer_step", "decoder_sparse_step")
    mlp_only = cfg.get("mlp_only_layers") or []
    step = step or 1
    moe = sum(1 for i in range(num_layers) if (i + 1) % step == 0 and i not in mlp_only)
    return num_layers - moe, moe


def _moe_shape(cfg: dict[str, Any], num_layers: int) -> MoeShape | None:
    experts = _int(cfg, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    if not experts or experts <= 1:
        return None
    top_k = _int(cfg, "num_experts_per_tok", "experts_per_token", "moe_top_k", "top_k")
    # MiniMax and Mixtral-style configs put the per-expert size in intermediate_size.
    per_expert = _int(cfg, "moe_intermediate_size") or _int(cfg, "intermediate_size")
    shared_size = _int(cfg, "shared_expert_intermediate_size", "shared_intermediate_size")
    shared = _int(cfg, "n_shared_experts", "num_shared_experts")
    if shared is None:
        shared = 1 if shared_size else 0
    if cfg.get("model_type") in ("llama4", "llama4_text"):
        shared = 1  # Llama 4 MoE layers always add one shared expert of the routed size
        shared_size = shared_size or per_expert
    dense, moe = _moe_layers(cfg, num_layers, True)
    return MoeShape(num_experts=experts, top_k=top_k, moe_intermediate_size=per_expert, num_shared_experts=shared,
                    shared_expert_intermediate_size=shared_size if shared else None, num_dense_layers=dense,
                    num_moe_layers=moe)


def _layer_kinds(cfg: dict[str, Any], num_layers: int, max_pos: int) -> tuple[int | None, int, int, list[str]]:
    """(sliding window, sliding layers, linear-attention layers, notes)."""
    notes: list[str] = []
    window = _int(cfg, "sliding_window")
    if cfg.get("use_sliding_window") is False:
        window = None
    layer_types = cfg.get("layer_types")
    linear = 0
    if isinstance(layer_types, list) and layer_types:
        sliding = sum(1 for t in layer_types if "sliding" in str(t))
        linear = sum(1 for t in layer_types if "linear" in str(t) or "mamba" in str(t))
    elif cfg.get("model_type") == "qwen3_next":
        interval = _int(cfg, "full_attention_interval") or 4
        linear = num_layers - num_layers // interval
        sliding = 0
    elif window and cfg.get("model_type") in ("gemma3", "gemma3_text"):
        pattern = _int(cfg, "sliding_window_pattern") or 6
        sliding = num_layers - num_layers // pattern
    elif window and window < max_pos:
        sliding = num_layers
    else:
        sliding = 0
    if window is None or window >= max_pos:
        sliding = 0
        window = None
    if cfg.get("attention_chunk_size"):
        notes.append("chunked local attention layers are counted as full attention (KV estimate is an upper bound)")
    if linear:
        notes.append(f"{linear} linear-attention layers keep a constant-size state, not per-token KV")
    return window, sliding, linear, notes


class _Params:
    """Parameter counts by part (whole model, unsharded)."""

    def __init__(self, *, embed: int, lm_head: int, attn: int, dense_mlp: int, moe_shared: int, expert: int,
                 layers: int, moe: MoeShape | None) -> None:
        self.embed, self.lm_head, self.attn, self.dense_mlp = embed, lm_head, attn, dense_mlp
        self.moe_shared, self.expert, self.layers, self.moe = moe_shared, expert, layers, moe

    @property
    def dense_layers(self) -> int:
        return self.moe.num_dense_layers if self.moe else self.layers

    @property
    def moe_layers(self) -> int:
        return self.moe.num_moe_layers if self.moe else 0

    def non_expert(self) -> int:
        return self.layers * self.attn + self.dense_layers * self.dense_mlp + self.moe_layers * self.moe_shared

    def total(self) -> int:
        experts = self.moe.num_experts if self.moe else 0
        return self.embed + self.lm_head + self.non_expert() + self.moe_layers * experts * self.expert

    def active(self) -> int:
        top_k = (self.moe.top_k or 1) if self.moe else 0
        return self.embed + self.lm_head + self.non_expert() + self.moe_layers * top_k * self.expert


def _count_params(cfg: dict[str, Any], *, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                  inter: int | None, vocab: int, tied: bool, mla: MlaShape | None,
                  moe: MoeShape | None) -> _Params | None:
    """Parameter counts by part, or None when a needed size is missing from the config."""
    if mla is not None:
        nope = mla.qk_nope_head_dim or 0
        v_dim = mla.v_head_dim or head_dim
        q_dim = heads * (nope + mla.qk_rope_head_dim)
        q = hidden * mla.q_lora_rank + mla.q_lora_rank * q_dim if mla.q_lora_rank else hidden * q_dim
        attn = q + hidden * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * heads * (nope + v_dim)
        attn += heads * v_dim * hidden
    else:
        attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    embed = vocab * hidden
    lm_head = 0 if tied else vocab * hidden
    dense_inter = _int(cfg, "intermediate_size_mlp") or inter
    if moe is None:
        if inter is None:
            return None
        return _Params(embed=embed, lm_head=lm_head, attn=attn, dense_mlp=3 * hidden * inter, moe_shared=0, expert=0,
                       layers=layers, moe=None)
    if moe.moe_intermediate_size is None or (moe.num_dense_layers and dense_inter is None):
        return None
    shared_inter = moe.shared_expert_intermediate_size or moe.moe_intermediate_size
    shared = moe.num_shared_experts * 3 * hidden * shared_inter + hidden * moe.num_experts
    return _Params(embed=embed, lm_head=lm_head, attn=attn, dense_mlp=3 * hidden * (dense_inter or 0),
                   moe_shared=shared, expert=3 * hidden * moe.moe_intermediate_size, layers=layers, moe=moe)


def facts_from_config(config: dict[str, Any], *, name: str, source: ModelSource, status: str = "",
                      sources: list[str] | None = None, notes: list[str] | None = None,
                      params_total_reported: float | None = None, params_active_reported: float | None = None,
                      index_total_bytes: int | None = None) -> ModelFacts:
    """Build ModelFacts from a config.json dictionary. Raises BadInputError when a needed field is missing."""
    if not isinstance(config, dict):
        raise BadInputError(f"model {name}: config.json is not a JSON object")
    cfg = _text_config(config)
    out_notes = list(notes or [])
    hidden = _require(_int(cfg, "hidden_size", "d_model", "n_embd"), "hidden_size", name)
    layers = _require(_int(cfg, "num_hidden_layers", "n_layer", "num_layers"), "num_hidden_layers", name)
    heads = _require(_int(cfg, "num_attention_heads", "n_head"), "num_attention_heads", name)
    kv_heads = _int(cfg, "num_key_value_heads", "num_kv_heads", "multi_query_group_num") or heads
    head_dim = _int(cfg, "head_dim") or hidden // heads
    vocab = _require(_int(cfg, "vocab_size", "padded_vocab_size"), "vocab_size", name)
    max_pos = _require(_int(cfg, "max_position_embeddings", "max_seq_len", "seq_length", "n_positions"),
                       "max_position_embeddings", name)
    tied = bool(cfg.get("tie_word_embeddings", False))
    arch_list = config.get("architectures") or cfg.get("architectures") or []
    architecture = str(arch_list[0]) if isinstance(arch_list, list) and arch_list else "unknown"
    model_type = str(config.get("model_type") or cfg.get("model_type") or "unknown")
    torch_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")

    mla: MlaShape | None = None
    kv_rank = _int(cfg, "kv_lora_rank")
    rope_dim = _int(cfg, "qk_rope_head_dim")
    if kv_rank and rope_dim:
        mla = MlaShape(kv_lora_rank=kv_rank, qk_rope_head_dim=rope_dim, qk_nope_head_dim=_int(cfg, "qk_nope_head_dim"),
                       v_head_dim=_int(cfg, "v_head_dim"), q_lora_rank=_int(cfg, "q_lora_rank"))
    if kv_heads > heads or heads % kv_heads:
        raise BadInputError(f"model {name}: {heads} attention heads are not a multiple of {kv_heads} KV heads")
    attention: AttentionKind
    if mla is not None:
        attention = "mla"
    elif kv_heads == heads:
        attention = "mha"
    elif kv_heads == 1:
        attention = "mqa"
    else:
        attention = "gqa"

    moe = _moe_shape(cfg, layers)
    inter = _int(cfg, "intermediate_size", "ffn_dim", "n_inner")
    window, sliding, linear, kind_notes = _layer_kinds(cfg, layers, max_pos)
    out_notes.extend(kind_notes)

    qcfg = cfg.get("quantization_config")
    if isinstance(qcfg, dict) and qcfg.get("quant_method"):
        block = qcfg.get("weight_block_size")
        block_list = [int(b) for b in block] if isinstance(block, list) and block else None
        unconverted = qcfg.get("modules_to_not_convert") or qcfg.get("ignored_layers") or []
        quant = quant_info(str(qcfg["quant_method"]), torch_dtype, block_list,
                           [str(m) for m in unconverted] if isinstance(unconverted, list) else None)
    else:
        quant = quant_info(None, torch_dtype)

    counted = _count_params(cfg, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                            inter=inter, vocab=vocab, tied=tied, mla=mla, moe=moe)
    half = _FLOAT_BYTES.get(torch_dtype, 2.0)
    weights: WeightBreakdown | None = None
    if counted is not None:
        total, active = counted.total(), counted.active()
        qb = quant.bytes_per_param
        attn_b = half if quant.attention_unquantized else qb
        weights = WeightBreakdown(
            embedding_bytes=int(counted.embed * half), lm_head_bytes=int(counted.lm_head * half),
            attention_bytes_per_layer=int(counted.attn * attn_b), dense_mlp_bytes_per_layer=int(counted.dense_mlp * qb),
            moe_shared_bytes_per_layer=int(counted.moe_shared * qb), expert_bytes=int(counted.expert * qb))
        experts = moe.num_experts if moe else 0
        computed_bytes = (weights.embedding_bytes + weights.lm_head_bytes + layers * weights.attention_bytes_per_layer
                          + counted.dense_layers * weights.dense_mlp_bytes_per_layer
                          + counted.moe_layers * (weights.moe_shared_bytes_per_layer + experts * weights.expert_bytes))
        params_computed = True
        if params_total_reported and abs(total - params_total_reported * 1e9) > 0.15 * params_total_reported * 1e9:
            out_notes.append(f"computed {total / 1e9:.1f}B parameters vs {params_total_reported}B reported")
    elif params_total_reported:
        total = int(params_total_reported * 1e9)
        active = int((params_active_reported or params_total_reported) * 1e9)
        computed_bytes = int(total * quant.bytes_per_param)
        params_computed = False
        out_notes.append("parameter count taken from the model card; the architecture is incomplete")
    else:
        raise BadInputError(f"model {name}: cannot size the weights (no intermediate sizes, no parameter count)")
    if index_total_bytes:
        ckpt_bytes, ckpt_source = index_total_bytes, "index"
    else:
        ckpt_bytes, ckpt_source = computed_bytes, ("computed" if params_computed else "reported-params")
    return ModelFacts(
        name=name, source=source, status=status, architecture=architecture, model_type=model_type,
        hidden_size=hidden, num_layers=layers, num_attention_heads=heads, num_kv_heads=kv_heads if mla is None else 1,
        head_dim=head_dim, intermediate_size=inter, vocab_size=vocab, max_position_embeddings=max_pos,
        tie_word_embeddings=tied, attention=attention, mla=mla, sliding_window=window, num_sliding_layers=sliding,
        num_linear_attention_layers=linear, moe=moe, quant=quant, torch_dtype=torch_dtype, params_total=total,
        params_active=active, params_computed=params_computed, checkpoint_bytes=ckpt_bytes,
        checkpoint_bytes_source=ckpt_source, weights=weights, sources=list(sources or []), notes=out_notes,
    )
