"""Arrival schedules: seeded, right mean rate, burstiness, ramps and trace replay."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pytest

from vllm_tune.tools.bench.arrivals import ramp_schedule, rate_schedule, read_trace
from vllm_tune.tools.errors import BadInputError


def gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(offsets)]


def test_same_seed_same_schedule_and_different_seed_differs() -> None:
    assert rate_schedule(100, 10.0, seed=3) == rate_schedule(100, 10.0, seed=3)
    assert rate_schedule(100, 10.0, seed=3) != rate_schedule(100, 10.0, seed=4)


def test_poisson_mean_rate_and_exponential_spread() -> None:
    g = gaps(rate_schedule(20_000, 50.0, seed=1))
    assert statistics.mean(g) == pytest.approx(1 / 50.0, rel=0.03)
    assert statistics.pstdev(g) / statistics.mean(g) == pytest.approx(1.0, rel=0.05)


def test_gamma_burstiness_sets_the_coefficient_of_variation() -> None:
    bursty = gaps(rate_schedule(20_000, 50.0, kind="gamma", burstiness=0.25, seed=2))
    smooth = gaps(rate_schedule(20_000, 50.0, kind="gamma", burstiness=4.0, seed=2))
    assert statistics.mean(bursty) == pytest.approx(0.02, rel=0.05)
    assert statistics.pstdev(bursty) / statistics.mean(bursty) == pytest.approx(2.0, rel=0.1)  # 1/sqrt(0.25)
    assert statistics.pstdev(smooth) / statistics.mean(smooth) == pytest.approx(0.5, rel=0.1)


def test_constant_rate_is_evenly_spaced() -> None:
    assert rate_schedule(5, 4.0, kind="constant") == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_bad_rates_are_refused() -> None:
    with pytest.raises(BadInputError):
        rate_schedule(10, 0.0)
    with pytest.raises(BadInputError):
        rate_schedule(10, float("inf"))


def test_ramp_density_follows_the_rate() -> None:
    offsets = ramp_schedule(100_000, 10.0, 100.0, 20.0, seed=5)
    first = sum(1 for t in offsets if t < 10.0)
    second = len(offsets) - first
    # Expected counts: integral of the rate = 325 in the first half, 775 in the second.
    assert first == pytest.approx(325, rel=0.15)
    assert second == pytest.approx(775, rel=0.1)
    assert offsets == sorted(offsets) and offsets[-1] <= 20.0


def test_trace_replay_rebases_milliseconds_and_reads_lengths(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [{"timestamp": 5000, "input_length": 10, "output_length": 3}, {"timestamp": 5250},
            {"timestamp": 6000, "input_len": 7}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    entries = read_trace(path)
    assert [e.offset_s for e in entries] == [0.0, 0.25, 1.0]
    assert (entries[0].input_len, entries[0].output_len, entries[2].input_len) == (10, 3, 7)


def test_trace_errors_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"nope": 1}\n')
    with pytest.raises(BadInputError, match=r"bad\.jsonl:1"):
        read_trace(path)
    with pytest.raises(BadInputError, match="cannot read"):
        read_trace(tmp_path / "missing.jsonl")
