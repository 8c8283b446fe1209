"""What a tuning session may store and pass on: no secret in a command, only runtime variables in its env, and
`vllm` resolved from vllm-tune's own environment."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.tune.launcher import ENV_VLLM_CMD, LaunchError, command_env, vllm_command
from vllm_tune.tools.tune.policy import check_command, check_env

SECRET = "sk-live-0123456789"


@pytest.mark.parametrize("command", [
    f"vllm serve org/m --api-key {SECRET}",
    f"vllm serve org/m --api-key={SECRET}",
    f"vllm serve org/m --api_key {SECRET}",
    f"vllm serve org/m --api-key other-key {SECRET} --max-num-seqs 4",
    f"vllm serve org/m --hf-token {SECRET}",
    f"vllm serve org/m --hf-token={SECRET}",
    f"VLLM_API_KEY={SECRET} vllm serve org/m",
    f"HF_TOKEN={SECRET} vllm serve org/m",
    f"vllm serve org/m --otlp-traces-endpoint https://user:{SECRET}@collector:4317",
    f"vllm serve org/m --otlp-traces-endpoint https://{SECRET}@collector:4317",
    f"vllm serve https://hub.example/m?token={SECRET}",
    f"vllm serve org/m --kv-transfer-config '{{\"url\": \"s3://b/k?X-Amz-Signature={SECRET}\"}}'",
])
def test_secret_bearing_commands_are_refused_without_echoing_the_value(command: str) -> None:
    with pytest.raises(BadInputError) as info:
        check_command(command)
    message = str(info.value)
    assert SECRET not in message and "\n" not in message
    assert "environment" in message


def test_the_error_says_which_variable_to_export() -> None:
    with pytest.raises(BadInputError, match="export VLLM_API_KEY"):
        check_command(f"vllm serve org/m --api-key {SECRET}")
    with pytest.raises(BadInputError, match="export HF_TOKEN"):
        check_command(f"vllm serve org/m --hf-token {SECRET}")


@pytest.mark.parametrize("command", [
    "vllm serve org/m --max-num-seqs 4",
    "vllm serve org/m --hf-token",  # no value: the token of `huggingface-cli login`
    "vllm serve org/m --hf-token --max-num-seqs 4",
    "CUDA_VISIBLE_DEVICES=0,1 VLLM_USE_V1=1 vllm serve org/m -tp 2",
    "vllm serve org/m --otlp-traces-endpoint http://collector:4317/v1?service=vllm",
])
def test_ordinary_commands_pass(command: str) -> None:
    check_command(command)


@pytest.mark.parametrize("name", ["VLLM_CPU_KVCACHE_SPACE", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "HF_HUB_OFFLINE",
                                  "OMP_NUM_THREADS", "TORCH_CUDA_ARCH_LIST", "PYTORCH_CUDA_ALLOC_CONF",
                                  "TRANSFORMERS_OFFLINE", "MASTER_PORT"])
def test_runtime_variables_are_allowed(name: str) -> None:
    check_env({name: "1"})


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME",
                                  "PYTHONSTARTUP", "VLLM_TUNE_VLLM_CMD", "VLLM_TUNE_RESULTS_DIR",
                                  "DYLD_INSERT_LIBRARIES", "HOME", "BASH_ENV", "http_proxy"])
def test_loader_interpreter_and_path_variables_are_refused(name: str) -> None:
    with pytest.raises(BadInputError, match="not allowed") as info:
        check_env({name: "/tmp/x"})
    assert "\n" not in str(info.value)
    with pytest.raises(BadInputError, match="not allowed"):
        check_command(f"{name}=/tmp/x vllm serve org/m")


@pytest.mark.parametrize("name", ["HF_TOKEN", "VLLM_API_KEY", "HUGGING_FACE_HUB_TOKEN", "NCCL_SECRET", "WANDB_API_KEY"])
def test_secret_looking_names_are_refused_as_secrets(name: str) -> None:
    with pytest.raises(BadInputError, match="looks like a secret"):
        check_env({name: "x"})


def test_env_prefix_of_the_command_reaches_the_server() -> None:
    assert command_env("CUDA_VISIBLE_DEVICES=1 VLLM_X='a b' vllm serve org/m --x=1") == {
        "CUDA_VISIBLE_DEVICES": "1", "VLLM_X": "a b"}
    assert command_env("vllm serve org/m A=1") == {}


def _executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_vllm_is_resolved_flag_then_env_then_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    on_path = _executable(bin_dir / "vllm")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv(ENV_VLLM_CMD, raising=False)
    assert vllm_command() == [str(on_path)]
    monkeypatch.setenv(ENV_VLLM_CMD, f"{sys.executable} '/a b/cli.py'")
    assert vllm_command() == [os.path.abspath(sys.executable), "/a b/cli.py"]
    explicit = _executable(tmp_path / "my-vllm")
    assert vllm_command(str(explicit)) == [str(explicit)]
    # a bare program name is looked up on vllm-tune's own PATH, once, to an absolute path
    assert vllm_command("vllm") == [str(on_path)]


def test_missing_vllm_names_every_way_to_give_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(ENV_VLLM_CMD, raising=False)
    with pytest.raises(LaunchError) as info:
        vllm_command()
    assert all(w in str(info.value) for w in ("--vllm-cmd", ENV_VLLM_CMD, "PATH"))
    with pytest.raises(LaunchError, match="no-such"):
        vllm_command(str(tmp_path / "no-such"))
