"""The accuracy harness's state checks: a case built to queue counts as queued from the server's queue-time
histogram when the once-a-second waiting gauge missed the queue, and not from an admission wait of a step."""

from __future__ import annotations

from vllm_tune.tools.whatif.accuracy import Case, CaseOutcome, failures, queue_share

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
