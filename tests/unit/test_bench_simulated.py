"""run_benchmark search_capacity with simulate: the capacity search predicted by what_if from a saved calibration.

The calibration is fitted on saved results that a known step model produced, so the predicted search can be
held against the search that model itself gives; the target URL has nothing listening on it, so any request
the simulated search tried to send would fail the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from support.simulated_runs import write_probe_results

from vllm_tune.cli.main import main
from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.whatif.api import simulate_capacity
from vllm_tune.tools.whatif.calibrate import DEFAULT_PROBE, calibrate_from_results, load_calibration, save
from vllm_tune.tools.whatif.capacity import parse_simulate
from vllm_tune.tools.whatif.simulate import EngineConfig, StepModel

TRUE = StepModel(fixed_s=0.004, per_decode_seq_s=0.0005, per_prefill_token_s=0.00004, request_overhead_s=0.002)
ENGINE = EngineConfig(num_gpu_blocks=16384, block_size=128)
NOBODY = "http://127.0.0.1:1"  # nothing listens on port 1: a request sent there fails the run
SLO = {"ttft": 300.0}


@pytest.fixture
def results(tmp_path: Path) -> list[str]:
    return write_probe_results(tmp_path, ENGINE, TRUE)


@pytest.fixture
def calibration(results: list[str], tmp_path: Path) -> str:
    return str(save(calibrate_from_results(results), tmp_path / "cal.json"))


def _request(simulate: str, tmp_path: Path, **kw: object) -> RunBenchmarkInput:
    fields: dict[str, object] = {"url": NOBODY, "search_capacity": True, "slo": SLO, "slo_percentile": 90.0,
                                 "input_len": 128, "output_len": 64, "search_prompts": 200,
                                 "save_result": str(tmp_path / "res"), "simulate": simulate, **kw}
    return RunBenchmarkInput.model_validate(fields)


@pytest.mark.anyio
async def test_simulated_search_predicts_the_capacity_of_the_model_it_was_calibrated_on(
        calibration: str, tmp_path: Path) -> None:
    out = await run_benchmark(_request(calibration, tmp_path))
    cap, sim = out.capacity, out.simulation
    assert out.state == "completed" and cap is not None and sim is not None
    assert cap.simulated and sim.simulated and sim.verify is None
    assert cap.capacity is not None and cap.lowest_failing is not None and cap.capacity < cap.lowest_failing
    assert {p.phase for p in cap.curve} >= {"probe", "bisect", "confirm"}  # run_benchmark's own search steps
    # The same search on the step model that produced the calibration runs finds about the same capacity.
    true_cal = load_calibration(calibration).model_copy(update={"step_model": TRUE})
    base = RunBenchmarkInput(url=NOBODY, concurrency=1, num_prompts=200, input_len=128, output_len=64)
    truth = await simulate_capacity(true_cal.engine, true_cal, base, slo=SLO, pct=90.0, variable="rate",
                                    probe_concurrency=64, repeats=2, num_prompts=200, seed_per_step=True)
    assert truth.capacity is not None
    assert cap.capacity == pytest.approx(truth.capacity, rel=0.15)
    # The uncertainty is the calibration's own residual on TTFT (the SLO) and throughput, stated with its number.
    cal = load_calibration(calibration)
    own = [abs(r.relative_error) for r in cal.residuals if "ttft" in r.metric or "throughput" in r.metric]
    assert sim.uncertainty_bound == max(own) and sim.max_abs_relative_error == cal.max_abs_relative_error
    assert f"{max(own):.0%}" in sim.uncertainty and sim.calibration_runs == len(DEFAULT_PROBE)
    saved = json.loads(Path(out.result_path or "").read_text())
    assert saved["vllm_tune"] == {"run_id": out.run_id, "kind": "capacity", "simulated": True}
    assert saved["capacity"]["capacity"] == cap.capacity


@pytest.mark.anyio
async def test_saved_results_calibrate_the_search_too(results: list[str], calibration: str, tmp_path: Path) -> None:
    from_results = await run_benchmark(_request(",".join(results), tmp_path, search_variable="concurrency"))
    from_file = await run_benchmark(_request(calibration, tmp_path, search_variable="concurrency"))
    assert from_results.simulation is not None and from_results.simulation.calibration_source == "results"
    assert from_results.capacity is not None and from_file.capacity is not None
    assert from_results.capacity.capacity == from_file.capacity.capacity  # the same fit, saved or not
    assert from_results.capacity.variable == "concurrency"


@pytest.mark.anyio
async def test_a_search_that_chunks_every_prompt_quotes_the_chunked_case(calibration: str, tmp_path: Path) -> None:
    # The calibration's prompts (up to 512 tokens) fit its budget of 2048 whole; 700-token prompts at 256 do not.
    chunked = await run_benchmark(_request(calibration, tmp_path, input_len=700,
                                           serve_flags={"max_num_batched_tokens": "256"}))
    assert chunked.simulation is not None
    assert any("prefilled in chunks" in w and "max_num_batched_tokens 256, 700 in, c=8" in w
               for w in chunked.simulation.warnings)
    whole = await run_benchmark(_request(calibration, tmp_path, input_len=700))
    assert whole.simulation is not None
    assert not any("prefilled in chunks" in w for w in whole.simulation.warnings)


def test_cli_prints_the_simulated_search_and_refuses_half_given_flags(
        calibration: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", NOBODY, "--search-capacity", "--slo", "ttft=300", "--slo-percentile", "90",
            "--random-input-len", "128", "--random-output-len", "64", "--result-dir", str(tmp_path / "res")]
    assert main([*args, "--simulate", "--calibration", calibration]) == 0
    out = capsys.readouterr().out
    assert "SLO capacity (simulated)" in out and "no search load was sent" in out and "uncertainty:" in out
    assert "held out on real vLLM" in out  # how such predictions landed on real runs (whatif-heldout.yaml)
    assert main([*args, "--simulate"]) == 2
    assert "--simulate needs one calibration" in capsys.readouterr().err
    assert main([*args, "--verify"]) == 2
    assert "go with --simulate" in capsys.readouterr().err
    assert main(["bench", NOBODY, "--slo", "ttft=300", "--simulate", "--probe"]) == 2
    assert "add --search-capacity" in capsys.readouterr().err


def test_simulate_values(calibration: str, results: list[str]) -> None:
    assert parse_simulate(f"{calibration},verify").calibration == calibration
    spec = parse_simulate(",".join(results))
    assert spec.from_result == results and not spec.sends_load
    assert parse_simulate("probe").sends_load and parse_simulate(f"{results[0]},verify").sends_load
    with pytest.raises(BadInputError, match="needs a calibration"):
        parse_simulate("verify")
    with pytest.raises(BadInputError, match="either probe or saved files"):
        parse_simulate(f"probe,{results[0]}")
    with pytest.raises(ValidationError, match="needs search_capacity"):
        RunBenchmarkInput(url=NOBODY, concurrency=2, simulate=calibration)


@pytest.mark.anyio
async def test_mcp_run_benchmark_simulates_without_asking_or_sending(calibration: str, tmp_path: Path) -> None:
    from mcp import Client

    from vllm_tune.server.app import build_server

    async with Client(build_server()) as client:
        got = await client.call_tool("run_benchmark", {
            "url": "http://203.0.113.9:8000", "search_capacity": True, "slo": SLO, "slo_percentile": 90.0,
            "input_len": 128, "output_len": 64, "simulate": calibration, "save_result": str(tmp_path / "res")})
        assert not got.is_error, got.content
        data = got.structured_content or {}
        assert data["capacity"]["simulated"] is True and data["simulation"]["uncertainty"]
        # A probe or a verify run sends load: off loopback, without confirmation, it is refused.
        refused = await client.call_tool("run_benchmark", {
            "url": "http://203.0.113.9:8000", "search_capacity": True, "slo": SLO, "simulate": f"{calibration},verify",
            "save_result": str(tmp_path / "res")})
        assert refused.is_error and "203.0.113.9" in refused.content[0].text  # type: ignore[union-attr]
        # A file outside the allowed roots is not read (the same line whether it exists or not).
        outside = await client.call_tool("run_benchmark", {
            "url": NOBODY, "search_capacity": True, "slo": SLO, "simulate": "/etc/hostname"})
        assert outside.is_error and "not under the allowed file roots" in outside.content[0].text  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_calibration_of_one_batch_size_makes_the_capacity_a_bound(results: list[str], tmp_path: Path) -> None:
    # results[1] alone ran every step at 16 sequences; the capacity search goes far past that.
    out = await run_benchmark(_request(results[1], tmp_path, search_variable="concurrency"))
    assert out.simulation is not None and out.capacity is not None and out.capacity.capacity is not None
    assert out.capacity.capacity > 20
    assert any(w.startswith("not enough data for an estimate: every calibration run kept 16 requests")
               for w in out.simulation.warnings)
