"""Tiny random-weight models (dense Llama and Mixtral MoE) cached under the test home."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .vllm_env import PROVISION_HINT, ComponentMissingError, ensure_vllm_python, test_home

# Bump when make_tiny_models.py changes so that cached models are rebuilt.
MODELS_VERSION = "1"
BUILDER = Path(__file__).with_name("make_tiny_models.py")
_DONE = ".complete"


@dataclass(frozen=True)
class TinyModels:
    llama: Path
    mixtral: Path


def models_dir() -> Path:
    return test_home() / f"tiny-models-v{MODELS_VERSION}"


def _models(root: Path) -> TinyModels:
    return TinyModels(llama=root / "tiny-llama", mixtral=root / "tiny-mixtral")


def ensure_tiny_models(build: bool = True) -> TinyModels:
    root = models_dir()
    if (root / _DONE).exists():
        return _models(root)
    if not build:
        raise ComponentMissingError(f"tiny models missing at {root}; {PROVISION_HINT}")
    python = ensure_vllm_python()
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([str(python), str(BUILDER), str(tmp)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ComponentMissingError(f"building tiny models failed:\n{proc.stderr[-3000:]}")
    (tmp / _DONE).write_text(MODELS_VERSION + "\n")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return _models(root)
