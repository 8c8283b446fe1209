"""`vllm-tune demo` runs offline on the embedded capture and shows every tool's answer."""

from __future__ import annotations

import json

import pytest

from vllm_tune.cli.main import main


def test_demo_diagnoses_the_embedded_overload(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "Knowledge base:" in out
    assert "Verdict: TTFT is high and the waiting queue is growing" in out
    assert "triage.ttft-high-queue-growing" in out
    assert "vllm-tune diagnose http://127.0.0.1:8000" in out


def test_demo_json_has_one_block_per_step(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["knowledge"]["entries"] >= 120
    assert data["knowledge"]["search"]["hits"][0]["id"] == "triage.ttft-high-queue-growing"
    assert data["diagnose"]["findings"][0]["id"] == "triage.ttft-high-queue-growing"
    assert data["diagnose"]["server"]["version"] == "0.32.0"
