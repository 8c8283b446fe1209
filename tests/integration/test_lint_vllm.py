"""The config lint against the real vLLM 0.32.0 parser: its bundled option table is what that parser builds, and
the lint refuses exactly the argument lists the parser refuses."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.vllm_env import ComponentMissingError, ensure_vllm_python

from vllm_tune.knowledge import SERVE_FLAGS_DIR
from vllm_tune.tools.lint.api import LintInput, lint_config

pytestmark = pytest.mark.integration

BUILDER = Path(__file__).resolve().parents[2] / "scripts" / "build_serve_flags.py"
REFUSED = {"unknown", "other-release", "missing-value", "bad-choice"}
ATTEMPTS = [
    ["--max-num-seqs", "8", "--gpu-memory-utilization", "0.85"],
    ["--max_num_seqs", "8"],
    ["--max-num-seq", "8"],
    ["--max-num", "8"],
    ["--bogus-option", "1"],
    ["--tensor-paralel-size", "2"],
    ["--disable-prefix-caching"],
    ["--no-enable-prefix-caching", "--enable-chunked-prefill"],
    ["-O3"],
    ["-O", "2"],
    ["-tp", "2", "-pp", "2"],
    ["-tp2"],
    ["-n2"],
    ["--kv-cache-dtype", "fp9"],
    ["--kv-cache-dtype", "fp8"],
    ["--dtype", "half"],
    ["--dtype", "float13"],
    ["--compilation-config.mode", "3"],
    ["--enable-expert-parallel", "--port"],
    ["--port=8001", "--host", "0.0.0.0"],
]


def _run(python: Path, *args: str, cwd: Path) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    proc = subprocess.run([str(python), str(BUILDER), *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env=env)
    if proc.returncode != 0:
        pytest.fail(f"{BUILDER.name} {' '.join(args)} failed: {proc.stderr.strip()[-2000:]}", pytrace=False)
    return proc.stdout


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    try:
        return ensure_vllm_python(install=False)
    except ComponentMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


def test_bundled_table_is_what_the_parser_builds(vllm_python: Path, tmp_path: Path) -> None:
    _run(vllm_python, "--out", str(tmp_path), cwd=tmp_path)
    fresh = json.loads((tmp_path / "serve-flags-0.32.0.json").read_text())
    bundled = json.loads((SERVE_FLAGS_DIR / "serve-flags-0.32.0.json").read_text())
    fresh.pop("generated")
    bundled.pop("generated")
    assert fresh == bundled


def test_lint_refuses_what_the_parser_refuses(vllm_python: Path, tmp_path: Path) -> None:
    attempts = tmp_path / "attempts.json"
    attempts.write_text(json.dumps(ATTEMPTS))
    accepted = json.loads(_run(vllm_python, "--try", str(attempts), cwd=tmp_path).strip().splitlines()[-1])
    assert len(accepted) == len(ATTEMPTS) and any(accepted) and not all(accepted)
    for args, ok in zip(ATTEMPTS, accepted, strict=True):
        out = lint_config(LintInput(command="vllm serve org/m " + " ".join(args), vllm_version="0.32.0",
                                    offline=True))
        refused = [p for p in out.option_problems if p.problem in REFUSED]
        assert (not refused) == ok, (args, ok, [(p.option, p.problem) for p in out.option_problems])
