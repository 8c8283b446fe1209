"""The config lint against the real vLLM 0.32.0 parser: its bundled option table is what that parser builds, and
the lint refuses exactly the argument lists the parser refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.vllm_parser import option_table, parse

from vllm_tune.knowledge import SERVE_FLAGS_DIR
from vllm_tune.tools.lint.api import LintInput, lint_config

pytestmark = pytest.mark.integration

REFUSED = {"unknown", "other-release", "missing-value", "bad-choice", "bad-value"}
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
    # values: the parser's type conversion, then the bounds of the config field the value lands in
    ["--tensor-parallel-size", "abc"],
    ["--gpu-memory-utilization", "nan"],
    ["--gpu-memory-utilization", "inf"],
    ["--gpu-memory-utilization", "1.5"],
    ["--gpu-memory-utilization", "0.5"],
    ["--max-num-seqs", "-5"],
    ["--max-num-seqs", "0"],
    ["--max-num-seqs", "true"],
    ["--max-num-seqs", "--port", "8001"],
    ["-tp", "0"],
    ["-dp", "0"],
    ["--max-model-len", "1e999"],
    ["--max-model-len", "32k"],
    ["--max-model-len", "auto"],
    ["--max-model-len", "-2"],
    ["--max-num-batched-tokens", "2.5"],
    ["--max-num-batched-tokens", "8K"],
    ["--port", "abc"],
    ["--seed", "-1"],
]
# Config YAML files, read by the parser through --config exactly as `vllm serve --config` does.
YAML_ATTEMPTS = [
    "tensor-parallel-size: {a: 1}\n",
    "max-num-seqs: true\n",
    "max-num-seqs: false\n",
    "max-model-len: 1e999\n",
    "tensor-parallel-size: .5\n",
    "tensor-parallel-size: 2\nmax-num-seqs: 16\n",
    "gpu-memory-utilization: .nan\n",
    "max-model-len: 4k\n",
    "enforce-eager: true\n",
]


def test_bundled_table_is_what_the_parser_builds(tmp_path: Path) -> None:
    fresh = option_table(tmp_path)
    bundled = json.loads((SERVE_FLAGS_DIR / "serve-flags-0.32.0.json").read_text())
    fresh.pop("generated")
    bundled.pop("generated")
    assert fresh == bundled


def test_lint_refuses_what_the_parser_refuses(tmp_path: Path) -> None:
    accepted = [p is not None for p in parse(ATTEMPTS, tmp_path)]
    assert len(accepted) == len(ATTEMPTS) and any(accepted) and not all(accepted)
    for args, ok in zip(ATTEMPTS, accepted, strict=True):
        out = lint_config(LintInput(command="vllm serve org/m " + " ".join(args), vllm_version="0.32.0",
                                    offline=True))
        refused = [p for p in out.option_problems if p.problem in REFUSED]
        assert (not refused) == ok, (args, ok, [(p.option, p.problem) for p in out.option_problems])


def test_lint_refuses_the_config_files_the_parser_refuses(tmp_path: Path) -> None:
    files = []
    for n, text in enumerate(YAML_ATTEMPTS):
        path = tmp_path / f"c{n}.yaml"
        path.write_text(text)
        files.append(path)
    accepted = [p is not None for p in parse([["--config", str(f)] for f in files], tmp_path)]
    assert any(accepted) and not all(accepted)
    for path, text, ok in zip(files, YAML_ATTEMPTS, accepted, strict=True):
        out = lint_config(LintInput(command="vllm serve org/m", config_file=str(path), vllm_version="0.32.0",
                                    offline=True))
        refused = [p for p in out.option_problems if p.problem in REFUSED]
        assert (not refused) == ok, (text, ok, [(p.option, p.problem) for p in out.option_problems])
