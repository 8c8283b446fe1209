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
