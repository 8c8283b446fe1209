"""Capacity search against a synthetic server model with a known answer."""

from __future__ import annotations

import pytest

from vllm_tune.tools.bench.capacity import SearchVariable, evaluate, search_capacity

TRUE_CAPACITY = 40.0  # req/s where p99 TTFT crosses 200 ms in the model below


def fake_result(rate: float) -> dict[str, float | int]:
    # M/M/1-like growth: latency = base / (1 - rate/limit); p99 TTFT crosses 200 ms at rate 40.
    limit = 50.0
    load = min(rate / limit, 0.999)
    ttft = 40.0 / (1 - load)
    return {"completed": 100, "failed": 0, "duration": 100 / rate + 0.3 if rate else 1.0,
            "request_throughput": rate, "output_throughput": rate * 10, "request_goodput": None,
            "p99_ttft_ms": ttft, "median_ttft_ms": ttft / 2, "p99_e2el_ms": ttft + 300, "median_e2el_ms": 300.0}


async def measure(variable: SearchVariable, value: float, phase: str) -> dict[str, float | int]:
    if phase == "probe":
        return fake_result(48.0)
    return fake_result(value)


@pytest.mark.anyio
async def test_rate_search_brackets_the_true_capacity() -> None:
    result = await search_capacity(measure, variable="rate", slo_ms={"ttft": 200}, pct=99, upper=None,
                                   probe_concurrency=64, repeats=2)
    assert result.capacity is not None and result.lowest_failing is not None
    assert result.capacity <= TRUE_CAPACITY < result.lowest_failing
    assert result.lowest_failing - result.capacity <= 0.1 * result.lowest_failing + 1e-9
    assert result.passes_at_capacity == "2/2" and result.fails_at_lowest_failing == "2/2"
    assert "met the SLO in 2/2 runs" in result.confidence
    assert result.knee is not None and result.knee.phase != "probe"


@pytest.mark.anyio
async def test_no_passing_load_is_said_plainly() -> None:
    result = await search_capacity(measure, variable="rate", slo_ms={"ttft": 1}, pct=99, upper=None,
                                   probe_concurrency=64, repeats=1)
    assert result.capacity is None and "no tested rate met the SLO" in result.confidence


@pytest.mark.anyio
async def test_concurrency_search_doubles_then_bisects() -> None:
    async def by_conc(variable: SearchVariable, value: float, phase: str) -> dict[str, float | int]:
        ttft = 20.0 * value  # crosses 200 ms above concurrency 10
        return {"completed": 50, "failed": 0, "duration": 5.0, "request_throughput": value,
                "output_throughput": 0.0, "p99_ttft_ms": ttft, "p99_e2el_ms": ttft + 100}

    result = await search_capacity(by_conc, variable="concurrency", slo_ms={"ttft": 200}, pct=99, upper=None,
                                   probe_concurrency=1, max_steps=10, repeats=1)
    assert result.capacity == 10.0 and result.lowest_failing == 11.0


def test_a_queue_that_drains_long_after_the_last_send_is_saturation() -> None:
    ok = evaluate(fake_result(10.0), "rate", 10.0, "bisect", {"ttft": 1000}, 99)
    assert not ok.saturated and ok.meets_slo
    backlog = dict(fake_result(10.0), duration=100 / 10.0 + 30.0)
    sat = evaluate(backlog, "rate", 10.0, "bisect", {"ttft": 1000}, 99)
    assert sat.saturated and not sat.meets_slo
