"""CLI values fuzzed: whatever an operator types into a value, the CLI answers with a result or one error line and
a defined exit code, never 'unexpected failure' (exit 1 from the last line of defence) or a traceback."""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest
from fuzzing import FUZZ, NASTY
from hypothesis import given
from hypothesis import strategies as st

from vllm_tune.cli.main import main

DATA = Path(__file__).parents[1]
RESULT = DATA / "unit" / "data" / "vllm_bench_serve_0.32_result.json"
SCRAPE = DATA / "data" / "captures" / "kv_thrash.after.prom"
VALUE = NASTY | st.text(max_size=12) | st.floats().map(repr) | st.integers().map(str) | \
    st.sampled_from(["ttft=100", "ttft=abc", "tpot=-1", "=", "ttft=1e999", "50,99", "50,nan", "ttft,e2el", "H200"])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("cli")
    shutil.copy(RESULT, tmp / "a.json")
    shutil.copy(SCRAPE, tmp / "m.prom")
    return {"a": str(tmp / "a.json"), "m": str(tmp / "m.prom")}


def _run(argv: list[str]) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse refusing a value: exit 2 with its usage line
            code = exc.code if isinstance(exc.code, int) else 2
    text = err.getvalue()
    assert "unexpected failure" not in text and "Traceback" not in text, (argv, text)
    assert code in (0, 1, 2, 3), (argv, code)


@FUZZ
@given(st.sampled_from(["--percentiles", "--metrics", "--confidence", "--noise-threshold", "--min-effect",
                        "--baseline", "--seed"]), VALUE)
def test_compare_values(files: dict[str, str], flag: str, value: str) -> None:
    _run(["compare", files["a"], files["a"], flag, value])


@FUZZ
@given(st.sampled_from(["--slo", "--window", "--max-num-seqs", "--tensor-parallel-size", "--model"]), VALUE)
def test_diagnose_values(files: dict[str, str], flag: str, value: str) -> None:
    _run(["diagnose", "--metrics-file", files["m"], flag, value])


@FUZZ
@given(st.sampled_from(["--env", "--vllm-version", "--gpu", "--nodes", "--model"]), VALUE, VALUE)
def test_lint_values(flag: str, value: str, serve_value: str) -> None:
    _run(["lint", "--offline", flag, value, "--command", f"vllm serve deepseek-r1 --max-num-seqs '{serve_value}'"])


@FUZZ
@given(st.sampled_from(["--gpus", "--gpu", "--isl", "--osl", "--slo", "--max-model-len", "--gpu-memory-utilization",
                        "--top", "--quantization", "--kv-cache-dtype", "--vllm-version"]), VALUE)
def test_plan_values(flag: str, value: str) -> None:
    args = {"--gpus": "8", "--gpu": "H200"}
    args[flag] = value
    _run(["plan", "deepseek-r1", "--offline", *[x for kv in args.items() for x in kv]])


@FUZZ
@given(st.sampled_from(["--gpu", "--tp", "--dp", "--dtype"]), VALUE)
def test_moe_values(flag: str, value: str) -> None:
    args = {"--gpu": "H200", "--tp": "8"}
    args[flag] = value
    _run(["moe", "deepseek-r1", *[x for kv in args.items() for x in kv]])
