"""tune_moe against the real vLLM 0.32.0 (CPU build): its server log, and its own config lookup.

What the CPU build shows: it serves MoE layers with the CPUUnquantizedExperts backend, never through the Triton
fused-MoE path, so the served tiny Mixtral logs neither the default-config warning nor "Using configuration from".
We therefore (1) check that our log reader finds no lookup there, (2) name the tiny model's config from its real
config.json, and (3) call vLLM's own get_moe_configs in the vLLM venv (possible on CPU once the platform's device
name is patched to a GPU's) on files our writer produced, parsing vLLM's real log lines with our reader.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tiny_models import TinyModels
from support.vllm_env import ensure_vllm_python
from support.vllm_server import VllmServer

from vllm_tune.tools.moe.api import MoeInput, run_moe
from vllm_tune.tools.moe.logs import read_moe_log
from vllm_tune.tools.moe.naming import ConfigKey
from vllm_tune.tools.moe.shape import resolve_shape
from vllm_tune.tools.moe.timers import CostModelTimer
from vllm_tune.tools.moe.tuner import tune
from vllm_tune.tools.moe.verify import lookup_with_real_vllm
from vllm_tune.tools.moe.writer import write_config

pytestmark = pytest.mark.integration


def test_served_tiny_mixtral_log_and_name(vllm_moe_server: VllmServer, tiny_models: TinyModels) -> None:
    text = vllm_moe_server.log_text()
    assert "MixtralForCausalLM" in text and "CPUUnquantizedExperts" in text
    findings = read_moe_log(text)
    assert findings.events == [], "the CPU build unexpectedly logged a Triton MoE config lookup"
    shape = resolve_shape(model=str(tiny_models.mixtral), gpu="H100", tp=1, dp=1, ep=False, dtype=None)
    assert shape.key.file_name() == "E=8,N=256,device_name=NVIDIA_H100_80GB_HBM3.json"
    assert (shape.tune_shape.hidden_size, shape.tune_shape.top_k) == (128, 2)


def test_vllm_lookup_loads_our_file_and_warns_without_it(tmp_path: Path, tiny_models: TinyModels) -> None:
    python = str(ensure_vllm_python(install=False))
    shape = resolve_shape(model=str(tiny_models.mixtral), gpu="NVIDIA H200 NVL", tp=2, dp=1, ep=False,
                          dtype=None)
    key = shape.key
    assert key == ConfigKey(8, 128, "NVIDIA_H200")
    result = tune(shape.tune_shape, [1, 32], CostModelTimer(), checkpoint=tmp_path / "ck.json", level="quick")
    path = write_config(tmp_path / "tuned", key, result.best)

    got = lookup_with_real_vllm(python, key, gpu_full_name="NVIDIA H200 NVL", tuned_folder=str(path.parent))
    assert got.file_name == key.file_name()  # vLLM's own name, incl. the H200 rule
    assert got.batch_sizes == [1, 32]
    assert got.loaded_from == str(path)  # from vLLM's real "Using configuration from" line

    empty = tmp_path / "empty"
    empty.mkdir()
    miss = lookup_with_real_vllm(python, key, gpu_full_name="NVIDIA H200 NVL", tuned_folder=str(empty))
    assert miss.batch_sizes is None
    warned = read_moe_log("\n".join(miss.log_lines))
    assert warned.default_warnings == 1 and warned.keys("default") == [key]
    assert str(empty / key.file_name()) in warned.events[0].paths


def test_verify_mode_with_real_vllm(tmp_path: Path, tiny_models: TinyModels) -> None:
    python = str(ensure_vllm_python(install=False))
    out = run_moe(MoeInput(model=str(tiny_models.mixtral), gpu="H100", mode="tune", confirm=True, budget_minutes=2,
                           backend="cost-model", search="quick", batch_sizes=[4], tuned_folder=str(tmp_path),
                           vllm_python=python))
    assert out.tune is not None and out.tune.written
    check = run_moe(MoeInput(model=str(tiny_models.mixtral), gpu="H100", mode="verify", tuned_folder=str(tmp_path),
                             vllm_python=python))
    assert check.verify is not None and check.verify.problems == []
    assert check.verify.real_vllm is not None and check.verify.real_vllm["batch_sizes"] == [4]
    assert check.status == "tuned"
