"""CLI errors: one line on stderr, or with --json one JSON object on stdout, and the documented exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "knowledge" / "samples"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_tune.cli", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize(("args", "code"), [
    (("kb", "show", "triage.no-such-rule"), 2),
    (("plan", "no-such/model-xyz", "--gpu", "H100", "--gpus", "8", "--offline"), 2),
    (("diagnose", "--metrics-file", "/nonexistent/metrics.prom"), 2),
])
def test_json_errors_are_json_on_stdout(args: tuple[str, ...], code: int) -> None:
    plain = _cli(*args)
    assert plain.returncode == code
    assert plain.stderr.startswith("vllm-tune: error: ") and plain.stderr.count("\n") == 1
    assert "Traceback" not in plain.stderr
    as_json = _cli(*args, "--json")
    assert as_json.returncode == code
    payload = json.loads(as_json.stdout)
    assert payload["exit_code"] == code
    assert payload["error"] and "\n" not in payload["error"]


def test_a_bad_flag_with_json_is_json_too() -> None:
    out = _cli("plan", "x", "--gpu", "H100", "--gpus", "nope", "--json")
    assert out.returncode == 2
    payload = json.loads(out.stdout)
    assert payload["exit_code"] == 2 and "--gpus" in payload["error"]


def test_a_cli_flag_error_from_a_handler_is_json_with_json() -> None:
    out = _cli("bench", "http://127.0.0.1:9", "--percentiles", "x,y", "--json")
    assert out.returncode == 2
    assert "--metric-percentiles" in json.loads(out.stdout)["error"]
