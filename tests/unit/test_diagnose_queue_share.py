"""queue_time_share_of_ttft: how much of the TTFT being judged was spent before prefill.

vLLM records TTFT at a request's first token but its queue and prefill time when it finishes, so a window's
histograms describe different requests. The failing window below is a real one (integration suite beside
stress-ng: 24 requests in flight on 2 seats, 128-token outputs at ~35 ms a token): the 2 requests that finished
had been admitted at once, the 4 first tokens went to requests that had waited seconds, and the old ratio (queue
time of the finished / TTFT of the first tokens) read 0.0001 and named the overload prefill-bound."""

from __future__ import annotations

import pytest

from vllm_tune.tools.diagnose.models import Capacity, Latency, ServeFlags, SloTargets, Workload
from vllm_tune.tools.diagnose.signals import Inputs, SignalSet, _latency_signals
from vllm_tune.tools.diagnose.snapshot import Histogram


def hist(count: float, mean_s: float) -> Histogram:
    return Histogram([float("inf")], [count], count * mean_s, count)


def share(**hists: Histogram) -> float | None:
    x = Inputs(window=None, log=None, workload=Workload(), latency=Latency(), capacity=Capacity(), hists=hists,
               flags=ServeFlags(), targets=SloTargets())
    s = SignalSet()
    _latency_signals(s, x)
    return s.get("queue_time_share_of_ttft")


def test_first_tokens_that_waited_are_queueing_even_when_the_finished_requests_did_not() -> None:
    value = share(ttft=hist(4, 2.2838), prefill=hist(2, 0.06), queue=hist(2, 0.0002))
    assert value is None  # 2 finished requests: too few to stand in for the prefill time of the first tokens
    value = share(ttft=hist(6, 2.2838), prefill=hist(3, 0.06), queue=hist(3, 0.0002))
    assert value is not None and value > 0.95


def test_steady_prefill_bound_window_keeps_a_low_share() -> None:
    # Same requests start and finish in the window: prefill is most of TTFT (tiny chunked-prefill budget).
    value = share(ttft=hist(20, 0.500), prefill=hist(20, 0.420), queue=hist(20, 0.080))
    assert value == pytest.approx(0.16, abs=0.001)


def test_without_a_prefill_histogram_the_cross_ratio_needs_enough_finished_requests() -> None:
    assert share(ttft=hist(6, 2.0), queue=hist(2, 0.0002)) is None
    assert share(ttft=hist(6, 2.0), queue=hist(4, 1.8)) == pytest.approx(0.9)
