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


def test_demo_checks_moe_coverage_offline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json"]) == 0
    moe = json.loads(capsys.readouterr().out)["moe"]
    assert moe["config_file_name"] == "E=8,N=7168,device_name=NVIDIA_B200.json"
    assert moe["status"] == "missing"
    assert any(n["file_name"] == "E=8,N=7168,device_name=NVIDIA_H200.json" for n in moe["nearest"])


def test_demo_plans_a_catalog_model_offline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan["feasible"] is True
    top = plan["candidates"][0]
    assert top["command"].startswith("vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size ")
    assert top["tensor_parallel_size"] * top["pipeline_parallel_size"] * top["data_parallel_size"] <= 8
    assert top["estimate"]["label"] == "estimate"
