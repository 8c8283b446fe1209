"""bench/bench_prefill_len.py's fits of prefill time over prompt length."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from bench_prefill_len import LENGTHS, fit_rms


def test_the_fits_tell_a_cost_per_token_pair_from_a_linear_one() -> None:
    # Prefill ms as the 2026-12-07 measurement fitted it: 3.6 ms + 6.2 us a token + 18.2 ns a token pair.
    points = [(n, 3.6 + 0.0062 * n + 18.2e-6 * n * n / 2) for n in LENGTHS for _ in range(3)]
    (a, b, c), rms = fit_rms(points, quadratic=True)
    assert (a, b, c) == pytest.approx((3.6, 0.0062, 18.2e-6), rel=1e-6) and rms < 1e-9
    (_a, slope), rms_linear = fit_rms(points, quadratic=False)
    # a straight line through it leaves ms-sized residuals and a slope above the per-token cost
    assert rms_linear > 0.5 and slope > 0.0062
    linear = [(n, 2.0 + 0.012 * n) for n in LENGTHS]
    (_a2, _b2, c2), _ = fit_rms(linear, quadratic=True)
    assert c2 == pytest.approx(0.0, abs=1e-12)
