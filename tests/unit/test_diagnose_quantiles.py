"""Histogram quantiles follow PromQL's histogram_quantile, checked against hand-computed values."""

from __future__ import annotations

import math
from pathlib import Path

from vllm_tune.tools.diagnose.quantiles import describe_resolution, fraction_at_or_below, histogram_quantile
from vllm_tune.tools.diagnose.snapshot import Histogram, parse_snapshot
from vllm_tune.tools.diagnose.window import Window

INF = math.inf
CAPTURES = Path(__file__).resolve().parents[1] / "data" / "captures"


def hist(bounds: list[float], cumulative: list[float]) -> Histogram:
    return Histogram(bounds, cumulative, sum=0.0, count=cumulative[-1])


H = hist([0.1, 0.5, 1.0, INF], [2, 6, 9, 10])


def test_interpolates_linearly_inside_the_bucket() -> None:
    # rank = 0.5 * 10 = 5 -> bucket (0.1, 0.5] holding ranks 2..6: 0.1 + 0.4 * (5 - 2) / 4 = 0.4
    assert histogram_quantile(0.5, H).value == 0.1 + 0.4 * 3 / 4
    # rank 9 -> bucket (0.5, 1] exactly at its top: 1.0
    assert histogram_quantile(0.9, H).value == 1.0
    # rank 1 in the first bucket starts from 0: 0.1 * 1 / 2
    assert histogram_quantile(0.1, H).value == 0.05


def test_overflow_bucket_returns_the_largest_finite_bound() -> None:
    q = histogram_quantile(0.95, H)  # rank 9.5 > 9: the +Inf bucket
    assert q.value == 1.0 and q.in_overflow and q.wide
    assert "above the largest finite bucket bound" in (describe_resolution("TTFT", q) or "")


def test_edge_cases_match_promql() -> None:
    assert math.isnan(histogram_quantile(0.5, hist([0.1, INF], [0, 0])).value)  # no observations
    assert math.isnan(histogram_quantile(0.5, hist([0.1, 0.5], [1, 2])).value)  # no +Inf bucket
    assert histogram_quantile(-0.1, H).value == -INF
    assert histogram_quantile(1.1, H).value == INF
    # a decreasing cumulative count (scrape race) is made monotonic first, as Prometheus does
    fixed = histogram_quantile(0.5, hist([0.1, 0.5, 1.0, INF], [2, 6, 5, 10]))
    assert fixed.value == histogram_quantile(0.5, hist([0.1, 0.5, 1.0, INF], [2, 6, 6, 10])).value


def test_wide_bucket_caveat_names_the_bucket() -> None:
    ttft = hist([0.1, 0.25, 0.5, 0.75, INF], [0, 10, 100, 100, 100])
    q = histogram_quantile(0.9, ttft)
    assert (q.lower, q.upper) == (0.25, 0.5) and q.wide
    assert describe_resolution("TTFT", q) == ("TTFT p90 lies in the 250-500 ms bucket; the value is interpolated "
                                              "and may be off by up to the bucket width")
    narrow = histogram_quantile(0.9, hist([1.0, 1.2, INF], [0, 10, 10]))
    assert not narrow.wide and describe_resolution("X", narrow) is None


def test_fraction_at_or_below_target() -> None:
    assert fraction_at_or_below(H, 0.5) == 0.6
    assert fraction_at_or_below(H, 0.3) == (2 + 4 * 0.5) / 10
    assert fraction_at_or_below(H, 5.0) == 0.9  # beyond the last finite bound: only what is known to be below


def test_window_delta_of_a_real_capture_matches_hand_computation() -> None:
    before = parse_snapshot((CAPTURES / "overload.before.prom").read_text(), "before")
    after = parse_snapshot((CAPTURES / "overload.after.prom").read_text(), "after")
    delta = Window(after=after, before=before, seconds=21.39).histogram("time_to_first_token_seconds")
    assert delta is not None and delta.count == 40
    # By hand from the two files: find the bucket where the cumulative delta first reaches 0.9 * 40 = 36.
    b = next(i for i, c in enumerate(delta.cumulative) if c >= 36)
    lo = delta.bounds[b - 1]
    expected = lo + (delta.bounds[b] - lo) * (36 - delta.cumulative[b - 1]) / (delta.cumulative[b] -
                                                                                delta.cumulative[b - 1])
    assert histogram_quantile(0.9, delta).value == expected
    assert 10.0 <= expected <= 20.0  # the CPU server queued requests for seconds under this overload
