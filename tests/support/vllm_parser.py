"""vLLM's own `vllm serve` argument parser, run in the test vLLM's venv through scripts/build_serve_flags.py
(the same script that builds the bundled option tables), without starting a server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from support.vllm_env import ComponentMissingError, ensure_vllm_python

BUILDER = Path(__file__).resolve().parents[2] / "scripts" / "build_serve_flags.py"


def _run(*args: str, cwd: Path) -> str:
    try:
        python = ensure_vllm_python(install=False)
    except ComponentMissingError as exc:
        raise AssertionError(str(exc)) from None
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    proc = subprocess.run([str(python), str(BUILDER), *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env=env, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{BUILDER.name} {' '.join(args)} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def option_table(folder: Path) -> dict[str, Any]:
    """The option table of the installed vLLM, freshly built into `folder`."""
    _run("--out", str(folder), cwd=folder)
    (path,) = folder.glob("serve-flags-*.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def parse(argvs: list[list[str]], folder: Path) -> list[dict[str, Any] | None]:
    """Per argument list, the attributes the real parser sets, or None where it refuses the list."""
    attempts = folder / "attempts.json"
    attempts.write_text(json.dumps(argvs))
    out: list[dict[str, Any] | None] = json.loads(_run("--try", str(attempts), cwd=folder).strip().splitlines()[-1])
    return out
