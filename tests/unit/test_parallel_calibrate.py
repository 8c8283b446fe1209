"""vllm-tune calibrate: reading result files, recovering known constants, storing them where plans find them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_tune.cli.main import main
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.models import resolve_model
from vllm_tune.tools.parallel import PlanInput, recommend_parallelism
from vllm_tune.tools.parallel.calibrate import CalibrationRun, calibrate, estimate_run, read_run
from vllm_tune.tools.parallel.params import HardwareCalibration, load_params

MODEL = "qwen2.5-7b"
TRUTH = HardwareCalibration(hardware="CPU", step_fixed_ms=40.0, seq_fixed_us=900.0, efficiency_scale=0.4, runs=[])


def _result(tmp: Path, name: str, conc: int, **flags: str) -> Path:
    """A result file whose figures come from the estimator under known constants (a synthetic machine)."""
    run = CalibrationRun(path=name, hardware="CPU", model=MODEL, input_len=128, output_len=64, concurrency=conc,
                         output_tokens_per_s=1.0)
    est = estimate_run(run, resolve_model(MODEL, offline=True), load_params(), TRUTH)
    assert est is not None
    body = {"output_throughput": est.output_tokens_per_s, "mean_tpot_ms": est.tpot_ms, "mean_ttft_ms": est.ttft_ms,
            "provenance": {"model": "served-name", "serve_flags_from_caller": {"hardware": "CPU", "model": MODEL,
                                                                               **flags},
                           "workload": {"input_len": 128, "output_len": 64}, "load": {"concurrency": conc}}}
    path = tmp / name
    path.write_text(json.dumps(body))
    return path


def test_calibration_recovers_a_machine_and_plans_use_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    files = [_result(tmp_path, "a.json", 1), _result(tmp_path, "b.json", 8, **{"--max-num-seqs": "64"})]
    out = calibrate(files, offline=True)
    assert out.hardware == "CPU" and Path(out.stored_at) == tmp_path / "cfg" / "vllm-tune" / "calibration.yaml"
    for run in out.runs:
        assert run.after == pytest.approx(run.measured_output_tokens_per_s, rel=0.05)
        assert run.before is not None and abs(run.before / run.measured_output_tokens_per_s - 1) > 0.5
    third = _result(tmp_path, "c.json", 4)
    measured = json.loads(third.read_text())["output_throughput"]
    plan = recommend_parallelism(PlanInput(model=MODEL, gpu="CPU", gpus=1, isl=128, osl=64, concurrency=4,
                                           offline=True))
    est = plan.candidates[0].estimate
    assert est is not None and est.calibration == "CPU"
    assert est.output_tokens_per_s == pytest.approx(measured, rel=0.15)
    assert any("calibration for CPU" in w for w in plan.warnings)
    other = recommend_parallelism(PlanInput(model=MODEL, gpu="H100", gpus=1, offline=True, concurrency=4))
    assert other.candidates[0].estimate is not None and other.candidates[0].estimate.calibration is None


def test_result_without_hardware_or_load_is_a_clear_error(tmp_path: Path) -> None:
    bare = tmp_path / "r.json"
    bare.write_text(json.dumps({"output_throughput": 10.0, "provenance": {"model": "m", "workload": {},
                                                                           "load": {"concurrency": 2}}}))
    with pytest.raises(BadInputError, match="hardware"):
        read_run(bare)
    assert read_run(bare, hardware="cpu", model=MODEL).hardware == "CPU"
    bare.write_text(json.dumps({"output_throughput": 10.0, "provenance": {"model": "m", "load": {}}}))
    with pytest.raises(BadInputError, match="neither a concurrency nor a rate"):
        read_run(bare, hardware="CPU")
    bare.write_text("not json")
    with pytest.raises(BadInputError, match="not a readable result file"):
        read_run(bare)


def test_calibrate_cli_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    assert main(["calibrate", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "nope.json" in err and "Traceback" not in err


def test_plan_help_documents_estimator_and_verify(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = capsys.readouterr().out
    assert "--estimator {builtin,aic,both}" in text and "AIConfigurator" in text
    assert "--verify URL" in text and "calibrate" in text
