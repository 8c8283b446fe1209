"""The accuracy harness's state checks: a case built to queue counts as queued from the server's queue-time
histogram when the once-a-second waiting gauge missed the queue, and not from an admission wait of a step; and
the protocol replayed offline on saved runs finds each run by its seed and predicts B with B's own flags."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_tune.tools.bench.api import RunBenchmarkInput
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.whatif.accuracy import (
    BENCH_SEED,
    CASES,
    PROOF_SEED,
    QUICK_PROBE,
    RUNS_OF_A_CASE,
    Case,
    CaseOutcome,
    calibration_line,
    evaluate_saved,
    failures,
    probe_base,
    queue_share,
)
from vllm_tune.tools.whatif.calibrate import Calibration, Residual, probe_seed_layout
from vllm_tune.tools.whatif.results import load_from_request, summarize
from vllm_tune.tools.whatif.simulate import EngineConfig, StepModel, run

QUEUES = Case("max_num_seqs 6, c=24 (queues)", {"--max-num-seqs": "6"}, {"concurrency": 24}, expect="queues")


def test_queue_seen_by_the_gauge_or_the_queue_time_histogram() -> None:
    by_gauge = CaseOutcome(QUEUES, measured_max_waiting=18, predicted_max_waiting=18)
    by_histogram = CaseOutcome(QUEUES, measuredqueue_share=queue_share(
        {"server_mean_queue_time_ms": 300.0, "server_mean_e2e_ms": 420.0}), predicted_max_waiting=18)
    assert failures([by_gauge]) == [] and failures([by_histogram]) == []


def test_an_admission_wait_of_one_step_is_not_a_queue() -> None:
    # 2 ms of queue time in a 140 ms request: the request waited for the next step, not for a seat
    step_wait = CaseOutcome(QUEUES, measuredqueue_share=queue_share(
        {"server_mean_queue_time_ms": 2.0, "server_mean_e2e_ms": 140.0}), predicted_max_waiting=18)
    unpredicted = CaseOutcome(QUEUES, measured_max_waiting=18, predicted_max_waiting=0)
    missing = CaseOutcome(QUEUES, measuredqueue_share=queue_share({"server_mean_queue_time_ms": 5.0}),
                          predicted_max_waiting=18)
    for outcome in (step_wait, unpredicted, missing):
        [line] = failures([outcome])
        assert line.startswith("max_num_seqs 6, c=24 (queues): expected a queue")


def test_measurement_is_the_mean_of_the_pair_and_the_change_is_from_a_mean() -> None:
    from vllm_tune.tools.whatif.accuracy import Row

    row = Row("c", "median_ttft_ms", reference=100.0, first=110.0, predicted=126.0, predicted_reference=100.0,
              repeat=130.0, reference_repeat=100.0)
    assert row.measured == 120.0 and row.measured_reference == 100.0
    assert abs(row.error - 0.05) < 1e-12 and row.within
    assert abs(row.measured_change - 0.2) < 1e-12
    assert abs(row.repeat_spread - 20 / 120) < 1e-12 and row.reference_spread == 0.0


def test_a_change_inside_the_pairs_spreads_is_not_judged_for_direction() -> None:
    from vllm_tune.tools.whatif.accuracy import Row

    # B is 14 % below A, the model says up: wrong, unless the runs of A and B differ by as much between themselves
    quiet = Row("c", "p90_tpot_ms", reference=10.0, first=8.6, predicted=11.0, predicted_reference=10.0,
                repeat=8.6, reference_repeat=10.0)
    noisy = Row("c", "p90_tpot_ms", reference=10.5, first=8.2, predicted=11.0, predicted_reference=10.0,
                repeat=9.0, reference_repeat=9.5)
    assert quiet.direction_judged and not quiet.direction_right
    assert noisy.spread_total > abs(noisy.measured_change) and not noisy.direction_judged and noisy.direction_right
    [line] = failures([CaseOutcome(QUEUES, rows=[quiet], measured_max_waiting=1, predicted_max_waiting=1)])
    assert "change measured -14%, predicted +10%" in line


URL = "http://127.0.0.1:8000"
TRUE = StepModel(fixed_s=0.004, per_decode_seq_s=0.0002, per_prefill_token_s=0.00002, request_overhead_s=0.004,
                 overhead_per_request_in_flight_s=0.001)
A_ENGINE = EngineConfig(num_gpu_blocks=4096, block_size=16, max_model_len=1024)


def _saved(engine: EngineConfig, fields: dict[str, Any], seed: int, model: StepModel = TRUE) -> dict[str, Any]:
    """A run_benchmark result as `engine` served by `model` would give it, saved with its provenance."""
    load = load_from_request(RunBenchmarkInput(url=URL, seed=seed, **fields))
    res = summarize(run(engine, model, load), load, engine, model, percentiles=[50.0, 90.0])
    res.update(input_lens=[p for p, _ in load.lens], output_lens=[o for _, o in load.lens],
               server={"cache_config": {"num_gpu_blocks": str(engine.num_gpu_blocks),
                                        "block_size": str(engine.block_size)}},
               provenance={"server_url": URL, "seed": seed, "max_model_len": engine.max_model_len,
                           "load": {"concurrency": fields.get("concurrency")},
                           "workload": {"kind": "random", "input_len": fields["input_len"],
                                        "output_len": fields["output_len"]}})
    return res


def test_the_protocol_replayed_on_saved_runs_recovers_the_server_that_made_them() -> None:
    # The max_num_batched_tokens case: its B ran on another server, whose budget comes from the case's flags.
    case = next(c for c in CASES if "--max-num-batched-tokens" in c.flags)
    seed = 104
    b_engine = A_ENGINE.model_copy(update={"max_num_batched_tokens": 256})
    results = [_saved(A_ENGINE, p.model_dump(), probe_base(seed) + i) for i, p in enumerate(QUICK_PROBE)]
    results += [_saved(A_ENGINE, case.reference_load, seed), _saved(A_ENGINE, case.reference_load, seed + 3000),
                _saved(b_engine, case.load, seed + 1000), _saved(b_engine, case.load, seed + 2000)]
    cal, outcome = evaluate_saved(results, seed, case)
    assert cal.converged
    by = {r.metric: r for r in outcome.rows}
    # Noise-free runs of a server the step model describes: predictions land on the measurements.
    for metric in ("request_throughput", "median_ttft_ms", "median_tpot_ms"):
        assert abs(by[metric].error) < 0.10, (metric, by[metric])
    # B is predicted with its own budget (with A's, no change would be predicted): here chunking staggers the
    # closed loop's prompts, which at the default budget were prefilled in lock-step, and the median TTFT falls.
    ttft = by["median_ttft_ms"]
    assert ttft.measured_change < -0.2 and ttft.predicted_change == pytest.approx(ttft.measured_change, abs=0.1)
    assert failures([outcome]) == []
    with pytest.raises(BadInputError, match="no saved runs with seeds"):
        evaluate_saved(results[:-1], seed, case)


def test_the_calibration_line_names_the_worst_fitted_runs_and_the_probe_drift() -> None:
    # What a miss in CI is read against: the runs the fit reproduced worst (largest relative error first, either
    # sign) and how far the probe's first point moved under it.
    residuals = [Residual(run=run, metric=m, measured=10.0, fitted=10.0 * (1 + e), relative_error=e)
                 for run, m, e in (("probe-0", "median_ttft_ms", 0.05), ("probe-2", "median_itl_ms", 0.40),
                                   ("A", "p90_ttft_ms", -0.25), ("probe-1", "median_tpot_ms", 0.10),
                                   ("A again", "request_throughput", -0.01))]
    cal = Calibration(step_model=StepModel(), engine=EngineConfig(), source="probe", residuals=residuals,
                      max_abs_relative_error=0.40, conditions={"probe_drift": {"change": -0.24}})
    line = calibration_line(cal)
    assert "residuals within 40%" in line
    assert line.endswith("; worst probe-2 median_itl_ms 10 -> 14, A p90_ttft_ms 10 -> 7.5, "
                         "probe-1 median_tpot_ms 10 -> 11; probe drift -24%")


def test_a_replay_fits_on_the_second_probe_when_the_first_moved_more() -> None:
    # probe_steadily probes again when the host's speed moved under the first probe, and keeps the steadier one;
    # the replay makes the same choice from the saved runs. Here the first probe ran on a host 60 % slower that was
    # back to speed for its repeat (drift -37 %), the second one at speed throughout.
    case = CASES[0]
    seed, size = 100, len(QUICK_PROBE) + 1
    slow = TRUE.model_copy(update={k: 1.6 * getattr(TRUE, k) for k in ("fixed_s", "per_decode_seq_s",
                                                                        "per_prefill_token_s")})
    first = [_saved(A_ENGINE, p.model_dump(), probe_base(seed) + i, slow) for i, p in enumerate(QUICK_PROBE)]
    first.append(_saved(A_ENGINE, QUICK_PROBE[0].model_dump(), probe_base(seed) + len(QUICK_PROBE)))
    second = [_saved(A_ENGINE, p.model_dump(), probe_base(seed) + size + i) for i, p in enumerate([*QUICK_PROBE,
                                                                                          QUICK_PROBE[0]])]
    runs = [_saved(A_ENGINE, case.reference_load, seed), _saved(A_ENGINE, case.reference_load, seed + 3000),
            _saved(A_ENGINE, case.load, seed + 1000), _saved(A_ENGINE, case.load, seed + 2000)]
    cal, outcome = evaluate_saved(first + second + runs, seed, case)
    drifts = cal.conditions["probe_drifts"]
    assert len(drifts) == 2 and drifts[0]["change"] < -0.3 and abs(drifts[1]["change"]) < 0.01
    assert cal.conditions["probe_drift"] == drifts[1]
    assert any("probed 2 times" in n for n in cal.notes)
    # Fitted on the steady probe and A's runs, all at TRUE's speed: TRUE comes back and B is predicted as it ran.
    assert cal.step_model.fixed_s == pytest.approx(TRUE.fixed_s, rel=0.02)
    assert all(abs(r.error) < 0.02 for r in outcome.rows), [(r.metric, r.error) for r in outcome.rows]
    # Without the second probe the slow one is all there is: the drift note says so, and the fit is off.
    cal_first, outcome_first = evaluate_saved(first + runs, seed, case)
    assert "probe_drifts" not in cal_first.conditions
    assert any("speed changed during the probe" in n for n in cal_first.notes)
    assert cal_first.step_model.fixed_s > 1.3 * TRUE.fixed_s
    assert next(r for r in outcome_first.rows if r.metric == "median_itl_ms").error > 0.3


def test_held_out_summary_counts_judged_predictions_per_kind_of_metric() -> None:
    from vllm_tune.tools.whatif.accuracy import Row
    from vllm_tune.tools.whatif.heldout import summarize

    rows = [
        # throughput: +10 % (within 20 %), and a B pair 40 % apart (not judged)
        Row("c", "request_throughput", 10.0, 10.0, 11.0, 10.0, 10.0, 10.0),
        Row("c", "request_throughput", 10.0, 8.0, 30.0, 10.0, 12.0, 10.0),
        # p50: -25 % (a miss) and +5 %; the first falls from A to B by half, predicted to rise: a wrong direction
        Row("c", "median_ttft_ms", 200.0, 100.0, 75.0, 50.0, 100.0, 200.0),
        Row("c", "median_tpot_ms", 2.0, 2.0, 2.1, 2.0, 2.0, 2.0),
        # p90: +30 % (within 35 %)
        Row("c", "p90_ttft_ms", 100.0, 100.0, 130.0, 100.0, 100.0, 100.0),
    ]
    out = summarize({"run-1": [CaseOutcome(QUEUES, rows=rows)]})
    assert out["runs"] == ["run-1"] and out["cases_per_run"] == 1
    assert out["kinds"]["throughput"] == {"judged": 1, "within_target": 1, "target": 0.2, "median_error": 0.1,
                                          "p90_error": 0.1, "worst_error": 0.1}
    p50 = out["kinds"]["p50"]
    assert (p50["judged"], p50["within_target"], p50["worst_error"]) == (2, 1, 0.25)
    assert out["kinds"]["p90"]["target"] == 0.35 and out["kinds"]["p90"]["within_target"] == 1
    assert out["directions"] == {"judged": 1, "right": 0}


def test_no_two_runs_of_the_protocol_draw_their_prompts_from_one_seed() -> None:
    # A seed drawn twice repeats its prompts, which the server's prefix cache then serves: a probe fitted on them
    # reads a cheap prefill. Every case's two probes (a retake) and four runs, in the bench's and the proof's seeds.
    seeds: list[int] = []
    for first in (BENCH_SEED, PROOF_SEED):
        for i in range(len(CASES)):
            seed = first + i
            for attempt in (0, 1):
                points, again = probe_seed_layout(probe_base(seed), len(QUICK_PROBE), attempt)
                seeds += [*points, again]
            seeds += [seed + offset for _name, offset, _on_b in RUNS_OF_A_CASE]
    assert len(seeds) == len(set(seeds))
