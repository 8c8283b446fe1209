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
