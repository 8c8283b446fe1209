"""what_if through its CLI, its MCP tool and predict_gain, on saved results of a known step model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client
from support.simulated_runs import write_probe_results

from vllm_tune.cli.main import main
from vllm_tune.server.app import build_server
from vllm_tune.tools.whatif import heldout
from vllm_tune.tools.whatif.api import WhatIfInput, predict_gain, what_if
from vllm_tune.tools.whatif.calibrate import calibrate_from_results
from vllm_tune.tools.whatif.simulate import EngineConfig, StepModel

TRUE = StepModel(fixed_s=0.004, per_decode_seq_s=0.0005, per_prefill_token_s=0.00004, request_overhead_s=0.002)
ENGINE = EngineConfig(num_gpu_blocks=16384, block_size=128)


@pytest.fixture
def results(tmp_path: Path) -> list[str]:
    return write_probe_results(tmp_path, ENGINE, TRUE)


def test_cli_compares_variants_in_one_table(results: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["whatif", *[a for p in results for a in ("--from", p)], "--concurrency", "24", "--input-len",
                 "128", "--output-len", "64", "--num-prompts", "96", "--set", "max_num_seqs=4",
                 "--set", "max_num_batched_tokens=4096,concurrency=48"])
    out = capsys.readouterr().out
    assert code == 0
    lines = [ln for ln in out.splitlines() if ln.startswith(("baseline", "max_num"))]
    names = [ln.split()[0] for ln in lines]
    assert names == ["baseline", "max_num_seqs=4", "max_num_batched_tokens=4096,concurrency=48"]
    assert "calibration (results" in out


def test_cli_json_and_direction_of_a_queueing_change(results: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", "--from", results[0], "--from", results[3], "--from", results[4], "--concurrency", "24",
                 "--input-len", "128", "--output-len", "64", "--set", "max_num_seqs=4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    base, fewer = data["baseline"]["result"], data["variants"][0]["result"]
    assert base["simulated"] is True
    assert fewer["median_ttft_ms"] > 2 * base["median_ttft_ms"]  # 20 of 24 requests now queue
    assert fewer["simulation"]["max_waiting"] >= 19


def test_cli_bad_input_is_one_line_and_exit_2(results: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", "--from", results[0], "--concurrency", "4", "--set", "max_num_sequences=4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown setting 'max_num_sequences'" in err[0]
    assert main(["whatif", "--concurrency", "4"]) == 2
    assert "give a calibration" in capsys.readouterr().err


@pytest.mark.anyio
async def test_predicted_capacity_and_gain(results: list[str]) -> None:
    out = await what_if(WhatIfInput(from_result=results, rate=5.0, input_len=128, output_len=64, num_prompts=200,
                                    variants=[{"max_num_seqs": "2"}], slo={"ttft": 300}, search_capacity=True,
                                    slo_percentile=90.0))
    base_cap, small_cap = out.baseline.capacity, out.variants[0].capacity
    assert base_cap is not None and small_cap is not None
    assert base_cap.capacity is not None
    assert (small_cap.capacity or 0.0) < base_cap.capacity  # two sequences at a time sustain less
    cal = calibrate_from_results(results)
    load = {"concurrency": 24, "input_len": 128, "output_len": 64, "num_prompts": 96}
    assert predict_gain(cal, {"max_num_seqs": "4"}, load=load) < 0
    assert predict_gain(cal, {"max_num_seqs": "4"}, load=load, metric="median_ttft_ms") < 0


@pytest.mark.anyio
async def test_mcp_tool(results: list[str]) -> None:
    async with Client(build_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["what_if"].annotations is not None
        assert tools["what_if"].annotations.read_only_hint is False  # probe=true sends load
        got = await client.call_tool("what_if", {"from_result": results, "concurrency": 8, "input_len": 64,
                                                 "output_len": 32, "variants": [{"max_num_batched_tokens": 512}]})
        assert not got.is_error
        data = got.structured_content
        assert data is not None and [r["variant"] for r in data["table"]] == ["baseline", "max_num_batched_tokens=512"]
        refused = await client.call_tool("what_if", {"url": "http://203.0.113.9:8000", "probe": True,
                                                     "concurrency": 4})
        assert refused.is_error


@pytest.mark.anyio
async def test_predictions_beyond_the_calibrated_range_are_flagged(results: list[str]) -> None:
    out = await what_if(WhatIfInput(from_result=results, concurrency=16, input_len=128, output_len=64,
                                    variants=[{"concurrency": "96"}, {"input_len": "1500"}]))
    assert out.baseline.warnings == []
    [far] = [w for w in out.variants[0].warnings if "96 sequences per step" in w]
    assert "TTFT is the least certain" in far
    # with how the protocol's case beyond the probe's concurrency landed on real vLLM (whatif-heldout.yaml)
    assert '"concurrency 48, 192 in / 96 out"' in far and "p90 TTFT " in far and "p50 ITL " in far
    [longer] = [w for w in out.variants[1].warnings if "1500-token prompts" in w]
    assert '"long prompts 900 in / 40 out, c=6"' in longer and "p50 TPOT " in longer
    # and which way the fitted prefill cost errs for prompts longer than the calibration's (bench_prefill_len.py)
    assert "prefill cost fitted on shorter prompts is a low estimate" in longer


@pytest.mark.anyio
async def test_chunking_prompts_the_calibration_saw_whole_quotes_how_that_case_held_on_real_vllm(
        results: list[str]) -> None:
    # The probe's prompts (up to 512 tokens) fit the default budget of 2048 whole. At 256 every 700-token prompt is
    # chunked: the warning quotes the protocol's chunked case from knowledge/calibration/whatif-heldout.yaml.
    out = await what_if(WhatIfInput(from_result=results, concurrency=8, input_len=700, output_len=48,
                                    variants=[{"max_num_batched_tokens": "256"}, {"max_num_batched_tokens": "1024"}]))
    held = heldout.load()
    assert held is not None
    case = held["situations"]["chunked"]
    ttft = case["metrics"]["median_ttft_ms"]
    [warning] = [w for w in out.variants[0].warnings if "prefilled in chunks" in w]
    assert "max_num_batched_tokens 256" in warning and "up to 512 tokens" in warning
    assert f"({case['runs']} runs)" in warning
    low, high = heldout.signed_percent(ttft["error_low"]), heldout.signed_percent(ttft["error_high"])
    assert f"p50 TTFT {low} to {high} (within 20% in {ttft['within_target']}/{ttft['judged']})" in warning
    assert not any("prefilled in chunks" in w for w in out.variants[1].warnings + out.baseline.warnings)


@pytest.mark.anyio
async def test_runs_of_one_batch_size_give_bounds_that_hold(results: list[str], tmp_path: Path) -> None:
    # results[1] alone: every request at concurrency 16 with 64-token prompts, so neither the cost per sequence nor
    # the cost per prompt token can be told from the fixed costs.
    from vllm_tune.tools.whatif.calibrate import Calibration, save

    load = {"concurrency": 16, "input_len": 64, "output_len": 128, "num_prompts": 64}
    variants: list[dict[str, str | int | float | bool]] = [{"concurrency": "48"}, {"concurrency": "4"},
                                                            {"input_len": "512"}]
    out = await what_if(WhatIfInput(from_result=[results[1]], variants=variants, **load))
    assert out.calibration.conditions["seen"]["single_batch"] == 16
    assert out.baseline.kind == "estimate" and not out.baseline.warnings
    assert [v.kind for v in out.variants] == ["best case", "worst case", "best case"]
    assert all(v.warnings[0].startswith("not enough data for an estimate") for v in out.variants)
    assert "extrapolating" not in " ".join(out.variants[2].warnings)  # the bound says it already
    # What the bounds claim holds against the step model the runs were simulated from.
    truth = save(Calibration(step_model=TRUE, engine=ENGINE, source="truth"), str(tmp_path / "truth.json"))
    real = await what_if(WhatIfInput(calibration=str(truth), variants=variants, **load))
    more, fewer, longer = (v.result for v in out.variants)
    real_more, real_fewer, real_longer = (v.result for v in real.variants)
    assert more.request_throughput >= real_more.request_throughput
    assert more.median_tpot_ms is not None and real_more.median_tpot_ms is not None
    assert more.median_tpot_ms <= real_more.median_tpot_ms
    assert fewer.request_throughput <= real_fewer.request_throughput
    assert longer.median_ttft_ms is not None and real_longer.median_ttft_ms is not None
    assert longer.median_ttft_ms <= real_longer.median_ttft_ms
    # Runs at two concurrencies: the per-sequence cost is fitted, and a larger batch is an estimate again.
    both = await what_if(WhatIfInput(from_result=[results[1], results[3]], variants=variants[:1], **load))
    assert "single_batch" not in both.calibration.conditions["seen"]
    assert both.variants[0].kind == "estimate"


def test_cli_table_marks_bounds(results: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", "--from", results[1], "--set", "concurrency=48"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("concurrency=48"))
    assert row.split()[1:3] == ["best", "case"]
    assert "warning (concurrency=48): not enough data for an estimate" in out
    assert main(["whatif", *[a for p in results for a in ("--from", p)], "--set", "concurrency=48"]) == 0
    assert " kind " not in capsys.readouterr().out  # estimates only: no kind column


@pytest.mark.anyio
async def test_a_metric_the_calibration_misses_on_its_own_run_is_not_predicted() -> None:
    # A real run of the suite's server whose tokens reached the client in bursts (median TPOT 2.2 ms, mean 8.3 ms):
    # the step model cannot reproduce that median, and the table says so instead of printing a number.
    sample = Path(__file__).resolve().parents[2] / "knowledge" / "samples" / "runs" / "max-num-seqs-2.json"
    out = await what_if(WhatIfInput(from_result=[str(sample)], variants=[{"max_num_seqs": "4"}]))
    tpot = next(r for r in out.calibration.residuals if r.metric == "median_tpot_ms")
    assert abs(tpot.relative_error) > 1.0
    assert [row["median_tpot_ms"] for row in out.table] == ["n/a", "n/a"]
    assert all(isinstance(row["request_throughput"], float) for row in out.table)  # within the limit: kept
    assert any(n.startswith("not enough data for median_tpot_ms") for n in out.notes)
    assert out.baseline.result.median_tpot_ms is not None  # the simulated result itself keeps the number


@pytest.mark.anyio
async def test_every_answer_says_how_such_predictions_held_against_real_runs() -> None:
    # The held-out accuracy of the protocol's saved runs (knowledge/calibration/whatif-heldout.yaml, checked against
    # a replay in test_whatif_replay_real.py) is the uncertainty an estimate carries beyond its own calibration's fit.
    sample = Path(__file__).resolve().parents[2] / "knowledge" / "samples" / "runs" / "max-num-seqs-2.json"
    out = await what_if(WhatIfInput(from_result=[str(sample)], variants=[{"max_num_seqs": "4"}]))
    [held] = [n for n in out.notes if n.startswith("held out on real vLLM")]
    assert "p90 latencies within 35% in" in held and "whatif-heldout.yaml" in held
