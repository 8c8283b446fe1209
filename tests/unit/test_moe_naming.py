"""Fused-MoE config file names against the names vLLM really ships (bundled 0.32.0 / 0.34.0 indexes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.coverage import index_dir, load_index
from vllm_tune.tools.moe.naming import (
    ConfigKey,
    config_dtype,
    down_file_supported,
    layer_shape,
    normalize_device_name,
    parse_config_file_name,
)
from vllm_tune.tools.moe.shape import resolve_shape

VLLM_CONFIGS = (Path.home() / ".cache/vllm-tune/testenv/vllm-0.32.0/lib/python3.11/site-packages/vllm/"
                "model_executor/layers/fused_moe/configs")


def shipped(version: str) -> set[str]:
    index = load_index(version)
    assert index is not None and index[0] == version
    return set(index[1])


def name_for(model: str, gpu: str, tp: int = 1, dp: int = 1, ep: bool = False, dtype: str | None = None) -> str:
    return resolve_shape(model=model, gpu=gpu, tp=tp, dp=dp, ep=ep, dtype=dtype, offline=True).key.file_name()


def test_bundled_indexes_exist_and_match_the_installed_wheel() -> None:
    assert (index_dir() / "index-0.32.0.json").is_file()
    assert (index_dir() / "index-0.34.0.json").is_file()
    if VLLM_CONFIGS.is_dir():
        on_disk = {p.name for p in VLLM_CONFIGS.iterdir() if p.name.startswith("E=")}
        assert shipped("0.32.0") == on_disk


@pytest.mark.parametrize("version", ["0.32.0", "0.34.0"])
def test_every_shipped_name_round_trips_through_our_builder(version: str) -> None:
    names = shipped(version)
    assert len(names) > 300
    for name in names:
        parsed = parse_config_file_name(name)
        assert parsed is not None, name
        key, down = parsed
        assert key.file_name(down=down) == name


@pytest.mark.parametrize(("tp", "n"), [(1, 14336), (2, 7168), (4, 3584)])
def test_mixtral_8x7b_tensor_parallel(tp: int, n: int) -> None:
    name = name_for("mistralai/Mixtral-8x7B-Instruct-v0.1", "H100", tp=tp)
    assert name == f"E=8,N={n},device_name=NVIDIA_H100_80GB_HBM3.json"
    fp8 = name_for("mistralai/Mixtral-8x7B-Instruct-v0.1", "H100", tp=tp, dtype="fp8")
    assert fp8 == f"E=8,N={n},device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"
    assert fp8 in shipped("0.32.0")
    # bf16 at TP1 on H100 is the one Mixtral layout vLLM 0.32 does not ship; TP2 and TP4 are shipped.
    assert (name in shipped("0.32.0")) == (tp != 1)


def test_mixtral_on_h200_and_dp_flattens_into_tp() -> None:
    assert name_for("mistralai/Mixtral-8x7B-Instruct-v0.1", "H200", tp=2, dp=2) == \
        "E=8,N=3584,device_name=NVIDIA_H200.json"


def test_deepseek_v3_fp8_block_with_dp_ep() -> None:
    name = name_for("deepseek-ai/DeepSeek-V3", "H200", tp=1, dp=8, ep=True)
    assert name == "E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    assert name in shipped("0.32.0")


def test_deepseek_v3_fp8_block_pure_tp16() -> None:
    name = name_for("deepseek-ai/DeepSeek-V3", "H100", tp=16)
    assert name == "E=256,N=128,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json"
    assert name in shipped("0.32.0")


def test_qwen3_moe_tp_and_ep() -> None:
    assert name_for("Qwen/Qwen3-30B-A3B", "H200", tp=4) == "E=128,N=192,device_name=NVIDIA_H200.json"
    assert "E=128,N=192,device_name=NVIDIA_H200.json" in shipped("0.32.0")
    ep = name_for("Qwen/Qwen3-235B-A22B", "H100", tp=8, ep=True)
    assert ep == "E=16,N=1536,device_name=NVIDIA_H100_80GB_HBM3.json"
    assert ep not in shipped("0.34.0")


@pytest.mark.parametrize(("raw", "expected"), [
    ("NVIDIA H200", "NVIDIA_H200"),
    ("NVIDIA H200 NVL", "NVIDIA_H200"),
    ("NVIDIA H200 141GB HBM3e", "NVIDIA_H200"),
    ("NVIDIA GH200 480GB", "NVIDIA_GH200_480GB"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA_A100-SXM4-80GB"),
    ("Intel(R) Arc(TM) Pro B70 Graphics", "Intel(R)_Arc(TM)_Pro_B70_Graphics"),
    ("Vendor X / Y  Z", "Vendor_X_Y_Z"),
])
def test_device_name_normalisation(raw: str, expected: str) -> None:
    assert normalize_device_name(raw) == expected


def test_normalised_catalog_gpus_match_shipped_device_names() -> None:
    devices = {parse_config_file_name(n)[0].device_name for n in shipped("0.34.0")}  # type: ignore[index]
    for gpu in ("H100", "H200", "B200", "MI300X", "A100"):
        key = resolve_shape(model="mistralai/Mixtral-8x7B-Instruct-v0.1", gpu=gpu, tp=2, dp=1, ep=False, dtype=None,
                            offline=True).key
        assert key.device_name in devices, gpu


def test_dtype_selectors() -> None:
    assert config_dtype(None) is None
    assert config_dtype("bf16") is None and config_dtype("auto") is None and config_dtype("mxfp4") is None
    assert config_dtype("fp8") == "fp8_w8a8"
    assert config_dtype("FP32") == "float32"
    for sel in ("fp8_w8a16", "int8_w8a8", "int8_w8a16", "int4_w4a16"):
        assert config_dtype(sel) == sel
    with pytest.raises(BadInputError):
        config_dtype("fp6")


def test_block_shape_needs_both_sizes_and_down_file_name() -> None:
    key = ConfigKey(8, 256, "NVIDIA_B200", "fp8_w8a8", (128, 0))
    assert key.file_name() == "E=8,N=256,device_name=NVIDIA_B200,dtype=fp8_w8a8.json"
    full = ConfigKey(8, 256, "NVIDIA_B200", "fp8_w8a8", (128, 128))
    assert full.file_name(down=True).endswith("block_shape=[128,128]_down.json")
    assert parse_config_file_name("/x/y/" + full.file_name(down=True)) == (full, True)
    assert down_file_supported("0.34.0") and not down_file_supported("0.32.0")


def test_bad_layouts_raise() -> None:
    with pytest.raises(BadInputError, match="do not divide"):
        layer_shape(num_experts=8, intermediate_size=14336, tp=3, enable_ep=True)
    with pytest.raises(BadInputError, match="does not divide"):
        layer_shape(num_experts=8, intermediate_size=14336, tp=3)
    with pytest.raises(BadInputError):
        layer_shape(num_experts=8, intermediate_size=14336, tp=0)
    with pytest.raises(BadInputError, match="no MoE"):
        resolve_shape(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", tp=1, dp=1, ep=False, dtype=None,
                      offline=True)
    with pytest.raises(BadInputError):
        resolve_shape(model="mistralai/Mixtral-8x7B-Instruct-v0.1", gpu="h9000", tp=1, dp=1, ep=False, dtype=None,
                      offline=True)


def test_ep_keeps_n_whole_and_single_rank_ep_is_plain() -> None:
    assert layer_shape(num_experts=256, intermediate_size=2048, tp=2, dp=4, enable_ep=True).local_experts == 32
    one = layer_shape(num_experts=8, intermediate_size=256, tp=1, enable_ep=True)
    assert (one.local_experts, one.intermediate_per_rank) == (8, 256)


def test_local_config_json(tmp_path: Path) -> None:
    cfg = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 128,
           "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
           "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 2048, "max_position_embeddings": 2048,
           "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = resolve_shape(model=str(tmp_path), gpu="NVIDIA GB10", tp=2, dp=1, ep=False, dtype=None)
    assert shape.key.file_name() == "E=8,N=128,device_name=NVIDIA_GB10.json"
    assert shape.tune_shape.hidden_size == 128 and shape.tune_shape.top_k == 2
