"""compare_runs statistics: percentiles agree with the bench metrics, the bootstrap is seeded and bounded,
and the verdict rule separates real changes from noise."""

from __future__ import annotations

import random

import pytest

from vllm_tune.tools.bench.metrics import describe, percentile
from vllm_tune.tools.compare.stats import (
    DRAW_BUDGET,
    MAX_RESAMPLES,
    MIN_RESAMPLES,
    Interval,
    bootstrap_differences,
    judge,
    relative_change,
    resample_count,
    statistic,
)


def _sample(seed: int, n: int, shift: float = 0.0) -> list[float]:
    rng = random.Random(seed)
    return [10.0 + shift + rng.expovariate(1.0) for _ in range(n)]


@pytest.mark.parametrize("p", [1.0, 50.0, 90.0, 95.0, 99.0, 99.9])
def test_percentiles_agree_with_the_bench_metrics(p: float) -> None:
    data = sorted(_sample(1, 257))
    label = f"p{int(p)}" if p.is_integer() else f"p{p}"
    assert statistic(data, label) == percentile(data, p)
    # describe() reports milliseconds from seconds; the same numbers must come out of statistic()
    stats = describe([v / 1000.0 for v in data], [p])
    assert statistic(data, label) == pytest.approx(stats[label])
    assert statistic(data, "mean") == pytest.approx(stats["mean"])
    assert statistic(data, "median") == pytest.approx(stats["median"])


def test_unknown_statistic_is_rejected() -> None:
    with pytest.raises(ValueError):
        statistic([1.0], "max")


def test_bootstrap_is_reproducible_with_a_seed_and_changes_without_it() -> None:
    a, b = _sample(2, 150), _sample(3, 150, shift=0.3)
    first, n1 = bootstrap_differences(a, b, ["mean", "p99"], confidence=0.95, seed="7:ttft", resamples=400)
    again, n2 = bootstrap_differences(a, b, ["mean", "p99"], confidence=0.95, seed="7:ttft", resamples=400)
    other, _ = bootstrap_differences(a, b, ["mean", "p99"], confidence=0.95, seed="8:ttft", resamples=400)
    assert n1 == n2 == 400
    assert first == again
    assert first["mean"] != other["mean"]


def test_bootstrap_interval_finds_a_real_shift_and_not_a_fake_one() -> None:
    base = _sample(4, 300)
    shifted = [v + 2.0 for v in _sample(5, 300)]
    intervals, _ = bootstrap_differences(base, shifted, ["mean", "median"], confidence=0.95, seed=1)
    assert intervals["mean"].excludes_zero() and intervals["mean"].low > 1.5 and intervals["mean"].high < 2.5
    assert intervals["median"].low > 1.0
    same, _ = bootstrap_differences(base, list(base), ["mean", "p90"], confidence=0.95, seed=1)
    assert not same["mean"].excludes_zero() and not same["p90"].excludes_zero()
    wider, _ = bootstrap_differences(base, shifted, ["mean"], confidence=0.99, seed=1)
    assert wider["mean"].high - wider["mean"].low > intervals["mean"].high - intervals["mean"].low


def test_resampling_work_is_bounded() -> None:
    assert resample_count(100, 100) == MAX_RESAMPLES
    assert resample_count(100, 100, requested=300) == 300
    assert resample_count(100, 100, requested=10_000) == MAX_RESAMPLES
    big = resample_count(10_000, 10_000)
    assert MIN_RESAMPLES <= big < MAX_RESAMPLES and big * 20_000 <= DRAW_BUDGET
    assert bootstrap_differences([], [1.0], ["mean"], confidence=0.95, seed=0) == ({}, 0)


def test_relative_change_handles_zero_baseline() -> None:
    assert relative_change(10.0, 12.0) == pytest.approx(20.0)
    assert relative_change(-10.0, -5.0) == pytest.approx(50.0)
    assert relative_change(0.0, 3.0) is None


@pytest.mark.parametrize(
    ("base", "cand", "better_when", "interval", "expected"),
    [
        (10.0, 12.0, "lower", Interval(1.5, 2.5), ("worse", "bootstrap")),
        (10.0, 8.0, "lower", Interval(-2.5, -1.5), ("better", "bootstrap")),
        (10.0, 12.0, "lower", Interval(-0.5, 4.0), ("within-noise", "bootstrap")),  # interval holds zero
        (100.0, 101.0, "lower", Interval(0.5, 1.5), ("within-noise", "bootstrap")),  # significant but 1 % < 2 %
        (10.0, 10.4, "lower", None, ("within-noise", "threshold")),  # 4 % < 5 %
        (10.0, 10.6, "lower", None, ("worse", "threshold")),
        (10.0, 10.6, "higher", None, ("better", "threshold")),
        (100.0, 90.0, "higher", None, ("worse", "threshold")),
        (0.0, 0.0, "higher", None, ("within-noise", "threshold")),
        (0.0, 1.0, "higher", None, ("better", "threshold")),
    ],
)
def test_verdict_rule(base: float, cand: float, better_when: str, interval: Interval | None,
                      expected: tuple[str, str]) -> None:
    assert judge(base, cand, better_when, interval=interval, noise_pct=5.0,  # type: ignore[arg-type]
                 min_effect_pct=2.0) == expected
