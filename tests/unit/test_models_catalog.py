"""Model facts from the bundled catalog and from config.json key spellings; GPU lookups."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.models import catalog_model_ids, custom_gpu, facts_from_config, get_gpu, gpu_names, resolve_model

LLAMA_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
    "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def test_every_catalog_model_resolves_offline() -> None:
    ids = catalog_model_ids()
    assert len(ids) >= 30
    for model_id in ids:
        facts = resolve_model(model_id, offline=True)
        assert facts.source == "catalog"
        assert facts.params_total >= facts.params_active > 0
        assert facts.checkpoint_bytes > 0
        assert facts.kv_bytes_per_token() > 0
        assert facts.sources, model_id


def test_aliases_are_case_insensitive() -> None:
    assert resolve_model("DeepSeek-R1").name == "deepseek-ai/DeepSeek-R1"
    assert resolve_model("deepseek-ai/deepseek-r1").name == "deepseek-ai/DeepSeek-R1"
    assert resolve_model("Llama-3.1-8B-Instruct").name == "meta-llama/Llama-3.1-8B-Instruct"


def test_llama_8b_counts_and_kv() -> None:
    facts = facts_from_config(LLAMA_8B, name="llama", source="local")
    assert facts.attention == "gqa"
    assert facts.head_dim == 128
    assert 8.0e9 < facts.params_total < 8.1e9  # 8.03B per the model card
    # 32 layers x 2 (K,V) x 8 heads x 128 dims x 2 bytes = 128 KiB per token
    assert facts.kv_bytes_per_token() == 32 * 2 * 8 * 128 * 2
    assert facts.kv_bytes_per_token("fp8") == facts.kv_bytes_per_token() / 2
    assert facts.checkpoint_bytes == pytest.approx(2 * facts.params_total, rel=0.01)


def test_deepseek_mla_moe_fp8_shape() -> None:
    facts = resolve_model("deepseek-v3")
    assert facts.attention == "mla"
    assert facts.num_kv_heads == 1
    assert facts.kv_bytes_per_token() == 61 * (512 + 64) * 2
    moe = facts.moe
    assert moe is not None
    assert (moe.num_experts, moe.top_k, moe.moe_intermediate_size, moe.num_shared_experts) == (256, 8, 2048, 1)
    assert (moe.num_dense_layers, moe.num_moe_layers) == (3, 58)
    assert facts.quant.weight_dtype == "fp8" and facts.quant.weight_block_size == [128, 128]
    assert 660e9 < facts.params_total < 685e9  # README: 671B without the MTP layer


@pytest.mark.parametrize("key", ["num_local_experts", "num_experts", "n_routed_experts"])
def test_expert_count_key_spellings(key: str) -> None:
    cfg = dict(LLAMA_8B, **{key: 8, "num_experts_per_tok": 2})
    facts = facts_from_config(cfg, name="moe", source="local")
    assert facts.moe is not None and facts.moe.num_experts == 8
    # Mixtral-style: the per-expert size lives in intermediate_size when moe_intermediate_size is absent
    assert facts.moe.moe_intermediate_size == 14336
    assert facts.moe.num_moe_layers == 32


def test_minimax_per_expert_size_and_block() -> None:
    facts = resolve_model("minimax-m2")
    assert facts.moe is not None and facts.moe.moe_intermediate_size == 1536
    assert facts.moe.num_shared_experts == 0
    assert facts.quant.weight_block_size == [128, 128]


def test_text_config_nesting() -> None:
    cfg = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
           "text_config": dict(LLAMA_8B, model_type="llama4_text", num_local_experts=16, num_experts_per_tok=1,
                               intermediate_size=8192, intermediate_size_mlp=16384, interleave_moe_layer_step=2)}
    facts = facts_from_config(cfg, name="l4", source="local")
    assert facts.architecture == "Llama4ForConditionalGeneration"
    assert facts.moe is not None
    assert (facts.moe.num_moe_layers, facts.moe.num_dense_layers, facts.moe.num_shared_experts) == (16, 16, 1)


def test_sliding_and_linear_layers_reduce_kv() -> None:
    oss = resolve_model("gpt-oss-120b")
    assert oss.num_sliding_layers == 18 and oss.sliding_window == 128
    assert oss.kv_bytes_per_token() == 18 * 2 * 8 * 64 * 2
    assert oss.quant.weight_dtype == "mxfp4" and oss.quant.attention_unquantized
    nxt = resolve_model("qwen3-next-80b")
    assert nxt.num_linear_attention_layers == 36
    assert nxt.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 2


def test_incomplete_architecture_uses_reported_params() -> None:
    glm = resolve_model("zai-org/GLM-4.5")
    assert not glm.params_computed and glm.params_total == 355_000_000_000
    assert glm.weights is None


@pytest.mark.parametrize("cfg", [
    {}, {"hidden_size": 10}, dict(LLAMA_8B, num_key_value_heads=7), dict(LLAMA_8B, vocab_size="x"), [1, 2],
])
def test_bad_configs_raise_bad_input(cfg: Any) -> None:
    with pytest.raises(BadInputError):
        facts_from_config(cfg, name="bad", source="local")


def test_gpu_lookup_short_and_full_names() -> None:
    assert get_gpu("h100").name == "H100"
    assert get_gpu("NVIDIA H100 80GB HBM3").name == "H100"
    assert get_gpu("nvidia h200").full_name == "NVIDIA H200"
    assert get_gpu("MI300X").vendor == "amd"
    assert get_gpu("L40S").interconnect.kind == "pcie"
    assert get_gpu("GB200").gpus_per_node == 4
    for name in ("H100", "H200", "H20", "B200", "B300", "GB200", "A100", "L40S", "MI300X", "MI325X", "MI355X"):
        spec = get_gpu(name)
        assert spec.memory_gib > 40 and spec.sources
    assert set(gpu_names()) >= {"H100", "B200", "MI355X"}


def test_unknown_gpu_lists_known_names() -> None:
    with pytest.raises(BadInputError, match="H100"):
        get_gpu("Z9000")


def test_custom_gpu() -> None:
    spec = custom_gpu("lab-card", memory_gib=64, bandwidth_tbs=2.0, tflops_bf16=400, interconnect="pcie")
    assert spec.sources == ["user-supplied"] and spec.tflops_for("fp8") == 400
    with pytest.raises(BadInputError):
        custom_gpu("absurd", memory_gib=1e9)
