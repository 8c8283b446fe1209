"""Metric definitions and result keys match `vllm bench serve` (vllm-facts.md §5.4)."""

from __future__ import annotations

import math
from array import array

import pytest

from vllm_tune.tools.bench.metrics import (
    check_goodput,
    compute_metrics,
    describe,
    percentile,
    percentile_label,
)
from vllm_tune.tools.bench.records import RequestRecord
from vllm_tune.tools.errors import BadInputError


def rec(i: int, *, start: float, ttft: float, itl: list[float], out: int, prompt: int = 10,
        ok: bool = True) -> RequestRecord:
    return RequestRecord(index=i, intended_send=start, start_time=start, success=ok, prompt_len=prompt,
                         output_len=out, ttft=ttft, latency=ttft + sum(itl), itl=array("d", itl),
                         error="" if ok else "HTTP 500")


def test_percentile_is_linear_interpolation_like_numpy() -> None:
    data = [1.0, 2.0, 3.0, 4.0]
    assert percentile(data, 50) == pytest.approx(2.5)
    assert percentile(data, 90) == pytest.approx(3.7)
    assert percentile(data, 0.0) == 1.0
    assert percentile(data, 100.0) == 4.0
    assert percentile([], 99) == 0.0
    assert percentile([5.0], 99) == 5.0


def test_describe_uses_population_std_and_milliseconds() -> None:
    stats = describe([0.001, 0.003], [99.0])
    assert stats["mean"] == pytest.approx(2.0)
    assert stats["std"] == pytest.approx(1.0)
    assert stats["median"] == pytest.approx(2.0)
    assert stats["p99"] == pytest.approx(2.98)


def test_percentile_labels_follow_vllm() -> None:
    assert percentile_label(99) == "p99"
    assert percentile_label(99.0) == "p99"
    assert percentile_label(99.9) == "p99.9"


def test_tpot_excludes_first_token_and_one_token_outputs() -> None:
    records = [
        rec(0, start=0.0, ttft=0.1, itl=[0.02, 0.02, 0.02], out=4),  # tpot = 0.06/3 = 20 ms
        rec(1, start=0.0, ttft=0.2, itl=[], out=1),  # no tpot
        rec(2, start=0.0, ttft=0.3, itl=[0.04], out=2),  # tpot = 40 ms
    ]
    m = compute_metrics(records, 1.0, percentiles=[50.0])
    assert m["mean_tpot_ms"] == pytest.approx(30.0)
    assert m["mean_itl_ms"] == pytest.approx((20 * 3 + 40) / 4)  # pooled gaps, not a per-request mean
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["mean_e2el_ms"] == pytest.approx((160 + 200 + 340) / 3)


def test_counts_throughput_and_failures() -> None:
    records = [rec(i, start=i * 0.1, ttft=0.05, itl=[0.01] * 9, out=10, prompt=32) for i in range(8)]
    records.append(rec(8, start=0.0, ttft=0.0, itl=[], out=0, ok=False))
    m = compute_metrics(records, 2.0, percentiles=[99.0])
    assert (m["completed"], m["failed"]) == (8, 1)
    assert m["total_input_tokens"] == 8 * 32
    assert m["total_output_tokens"] == 80
    assert m["request_throughput"] == pytest.approx(4.0)
    assert m["output_throughput"] == pytest.approx(40.0)
    assert m["total_token_throughput"] == pytest.approx((256 + 80) / 2.0)
    assert m["request_goodput"] is None
    for name in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p99"):
            assert f"{stat}_{name}_ms" in m


def test_goodput_requires_every_slo_and_counts_tpot_zero_for_single_token() -> None:
    records = [
        rec(0, start=0.0, ttft=0.05, itl=[0.01] * 3, out=4),  # good
        rec(1, start=0.0, ttft=0.50, itl=[0.01] * 3, out=4),  # TTFT too slow
        rec(2, start=0.0, ttft=0.05, itl=[0.09] * 3, out=4),  # TPOT too slow
        rec(3, start=0.0, ttft=0.05, itl=[], out=1),  # one token: TPOT counts as 0 -> good
    ]
    m = compute_metrics(records, 2.0, percentiles=[99.0], slo_ms={"ttft": 100, "tpot": 50})
    assert m["request_goodput"] == pytest.approx(2 / 2.0)


def test_goodput_keys_are_only_ttft_tpot_e2el() -> None:
    assert check_goodput({"ttft": 100, "e2el": 1000}) == {"ttft": 100, "e2el": 1000}
    with pytest.raises(BadInputError, match="ITL is not a per-request value"):
        check_goodput({"itl": 50})
    with pytest.raises(BadInputError):
        check_goodput({"ttft": 0})


def test_peak_tokens_and_concurrency_per_second_bucket() -> None:
    # Two overlapping requests in the first second, one later request.
    records = [rec(0, start=0.0, ttft=0.1, itl=[0.1] * 4, out=5), rec(1, start=0.2, ttft=0.1, itl=[0.1] * 4, out=5),
               rec(2, start=2.5, ttft=0.1, itl=[0.1], out=2)]
    m = compute_metrics(records, 3.0, percentiles=[])
    assert m["max_output_tokens_per_s"] == 10.0
    assert m["max_concurrent_requests"] == 2


def test_no_successes_gives_zeros_not_errors() -> None:
    m = compute_metrics([rec(0, start=0, ttft=0, itl=[], out=0, ok=False)], 1.0, percentiles=[99.0])
    assert m["completed"] == 0 and m["mean_ttft_ms"] == 0.0 and m["p99_itl_ms"] == 0.0
    assert not math.isnan(m["request_throughput"])
