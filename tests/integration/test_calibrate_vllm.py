"""Predict -> verify -> calibrate on the suite's real vLLM CPU server with the CPU hardware entry.

`plan --verify` measures the plan's first layout at three loads (the server was started by the suite, as an
operator would start the plan's command); `calibrate` fits the CPU's constants from two of those results; the
estimate for the third load must then land closer to its measurement than the bundled constants did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.tiny_models import TinyModels
from support.vllm_server import VllmServer

from vllm_tune.cli.main import main

pytestmark = pytest.mark.integration

ISL, OSL = 64, 64
PROMPTS = "64"  # enough requests per run that the shared box's noise averages out


def _plan(capsys: pytest.CaptureFixture[str], model: Path, conc: int, *extra: str) -> dict[str, Any]:
    code = main(["plan", str(model), "--gpu", "CPU", "--gpus", "1", "--isl", str(ISL), "--osl", str(OSL),
                 "--concurrency", str(conc), "--goal", "throughput", "--json", *extra])
    out = capsys.readouterr().out
    assert code == 0, out
    data: dict[str, Any] = json.loads(out)
    return data


def _metric(plan: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in plan["verification"]["metrics"] if m["metric"] == name)


def test_verify_then_calibrate_moves_the_third_estimate_closer(
        vllm_server: VllmServer, tiny_models: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    results = tmp_path / "results"
    verified = {}
    for conc in (1, 4, 8):
        plan = _plan(capsys, tiny_models.llama, conc, "--verify", vllm_server.url, "--verify-prompts", PROMPTS,
                     "--verify-result-dir", str(results))
        v = plan["verification"]
        assert v["concurrency"] == conc and v["layout"] == "TP1" and Path(v["result_path"]).exists()
        for name in ("output_tokens_per_s", "mean_tpot_ms", "mean_ttft_ms"):
            m = _metric(plan, name)
            # the printed numbers are rounded to 3-4 significant digits (0.0332 for 0.03315)
            assert m["estimate"] > 0 and m["measured"] > 0 and m["ratio"] == pytest.approx(
                m["estimate"] / m["measured"], rel=5e-3)
        saved = json.loads(Path(v["result_path"]).read_text())
        flags = saved["provenance"]["serve_flags_from_caller"]
        assert flags["hardware"] == "CPU" and flags["model"] == str(tiny_models.llama)
        assert flags["command"] == plan["candidates"][0]["command"]
        assert plan["candidates"][0]["estimate"]["calibration"] is None
        verified[conc] = (v["result_path"], _metric(plan, "output_tokens_per_s"))

    code = main(["calibrate", verified[1][0], verified[4][0], "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["hardware"] == "CPU"
    stored = tmp_path / "config" / "vllm-tune" / "calibration.yaml"
    assert Path(out["stored_at"]) == stored and stored.exists()
    for run in out["runs"]:  # the fit explains the runs it saw better than the bundled constants
        meas = run["measured_output_tokens_per_s"]
        assert abs(run["after"] / meas - 1) < abs(run["before"] / meas - 1)

    after = _plan(capsys, tiny_models.llama, 8)
    est = after["candidates"][0]["estimate"]
    assert est["calibration"] == "CPU" and "calibrated for CPU" in est["uncertainty"]
    assert any("calibration for CPU" in w for w in after["warnings"])
    third = verified[8][1]
    before_err = abs(third["estimate"] / third["measured"] - 1)
    after_err = abs(est["output_tokens_per_s"] / third["measured"] - 1)
    assert after_err < before_err, (third, est["output_tokens_per_s"])


def test_verify_against_a_closed_port_is_a_one_line_error(capsys: pytest.CaptureFixture[str],
                                                          tiny_models: TinyModels) -> None:
    code = main(["plan", str(tiny_models.llama), "--gpu", "CPU", "--gpus", "1", "--concurrency", "1",
                 "--verify", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
