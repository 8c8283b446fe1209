"""SLO capacity search: the highest request rate (or concurrency) whose percentile latencies meet the SLO.

Method: a saturation probe gives the most the server completes; a bisection between zero and that
throughput narrows the boundary (a step whose achieved throughput falls well short of its target is
saturated and counts as failing, which stops the search early); the best passing and the lowest
failing points are then re-run so the answer comes with how often each held. Every measured point
also goes on the latency-throughput curve, whose knee is the point of highest "power"
(throughput / percentile latency), the usual operating-point definition (Kleinrock).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from vllm_tune.tools.bench.metrics import percentile_label

SearchVariable = Literal["rate", "concurrency"]
Measure = Callable[[SearchVariable, float, str], Awaitable[dict[str, Any]]]


class CurvePoint(BaseModel):
    variable: SearchVariable
    value: float = Field(description="target request rate (req/s) or concurrency")
    phase: str
    achieved_request_throughput: float
    output_throughput: float
    request_goodput: float | None
    completed: int
    failed: int
    latencies_ms: dict[str, float] = Field(description="the SLO percentile of ttft/tpot/e2el, plus p50s")
    meets_slo: bool
    saturated: bool
    violations: list[str] = Field(default_factory=list)


class CapacityResult(BaseModel):
    variable: SearchVariable
    slo_ms: dict[str, float]
    slo_percentile: float
    capacity: float | None = Field(description="highest tested value that met the SLO in every run (None: none did)")
    capacity_request_throughput: float | None = None
    lowest_failing: float | None = None
    max_throughput: float | None = Field(default=None, description="req/s completed at saturation")
    passes_at_capacity: str | None = None
    fails_at_lowest_failing: str | None = None
    confidence: str
    knee: CurvePoint | None = None
    curve: list[CurvePoint] = Field(default_factory=list)
    stopped_early: str | None = None
    decided_by: list[str] = Field(default_factory=list, description="the targets and percentile that decided "
                                  "the capacity: the slowest pass at it, the misses above it")
    simulated: bool = Field(default=False, description="true: every point was simulated by what_if, none sent")


def evaluate(result: dict[str, Any], variable: SearchVariable, value: float, phase: str, slo_ms: dict[str, float],
             pct: float) -> CurvePoint:
    label = percentile_label(pct)
    lat: dict[str, float] = {}
    violations: list[str] = []
    for key in ("ttft", "tpot", "e2el"):
        v = result.get(f"{label}_{key}_ms")
        if v is not None:
            lat[f"{label}_{key}"] = float(v)
        p50 = result.get(f"median_{key}_ms")
        if p50 is not None:
            lat[f"median_{key}"] = float(p50)
    for key, limit in slo_ms.items():
        got = result.get(f"{label}_{key}_ms")
        if got is None or float(got) > limit:
            violations.append(f"{label} {key} {float(got or math.nan):.1f} ms > {limit:g} ms")
    achieved = float(result.get("request_throughput") or 0.0)
    completed, failed = int(result.get("completed") or 0), int(result.get("failed") or 0)
    saturated = False
    if variable == "rate" and phase != "probe" and completed and value > 0:
        # Sends span about completed/value seconds; a server that kept up finishes about one median latency
        # later. A much longer drain means a queue built up: the load is past what the server sustains.
        drain = float(result.get("duration") or 0.0) - completed / value
        saturated = drain > max(1.0, 3.0 * float(result.get("median_e2el_ms") or 0.0) / 1000.0)
    if saturated:
        violations.append("saturated: requests queued faster than they completed")
    if failed:
        violations.append(f"{failed} requests failed")
    return CurvePoint(variable=variable, value=value, phase=phase, achieved_request_throughput=achieved,
                      output_throughput=float(result.get("output_throughput") or 0.0),
                      request_goodput=result.get("request_goodput"), completed=completed, failed=failed,
                      latencies_ms=lat, meets_slo=not violations and not saturated and completed > 0,
                      saturated=saturated, violations=violations)


def knee(points: list[CurvePoint], pct: float) -> CurvePoint | None:
    key = f"{percentile_label(pct)}_e2el"
    scored = [(p.achieved_request_throughput / p.latencies_ms[key], p) for p in points
              if p.latencies_ms.get(key) and p.completed]
    return max(scored, key=lambda s: s[0])[1] if scored else None


class _Search:
    def __init__(self, measure: Measure, variable: SearchVariable, slo_ms: dict[str, float], pct: float,
                 should_stop: Callable[[], bool]) -> None:
        self.measure, self.variable, self.slo_ms, self.pct = measure, variable, slo_ms, pct
        self.should_stop = should_stop
        self.curve: list[CurvePoint] = []
        self.lo_pass = 0.0
        self.hi_fail = math.inf
        self.stopped: str | None = None
        self.max_tp: float | None = None

    async def run(self, value: float, phase: str) -> CurvePoint:
        result = await self.measure(self.variable, value, phase)
        point = evaluate(result, self.variable, value, phase, self.slo_ms, self.pct)
        self.curve.append(point)
        return point

    def _record(self, value: float, point: CurvePoint) -> None:
        if point.meets_slo:
            self.lo_pass = max(self.lo_pass, value)
        else:
            self.hi_fail = min(self.hi_fail, value)
            if point.saturated and self.stopped is None:
                self.stopped = f"saturated at {self.variable} {value:g}: the queue kept draining after the last send"

    async def by_rate(self, upper: float | None, probe_concurrency: int, max_steps: int, tolerance: float) -> None:
        probe = await self.run(float(probe_concurrency), "probe")
        self.max_tp = probe.achieved_request_throughput
        hi = upper or max(self.max_tp * 1.05, 0.1)
        if upper is None and probe.meets_slo:
            # The SLO holds even at saturation: try the saturation throughput as a rate.
            self._record(hi, await self.run(round(hi, 3), "bisect"))
            if self.lo_pass >= hi:
                return
        self.hi_fail = min(self.hi_fail, hi) if upper is None else math.inf
        value = hi / 2 if upper is None else upper
        for _ in range(max_steps):
            if self.should_stop():
                return
            self._record(value, await self.run(round(value, 3), "bisect"))
            if math.isinf(self.hi_fail):
                return  # the upper bound itself passed
            if self.hi_fail - self.lo_pass <= tolerance * self.hi_fail:
                return
            value = (self.lo_pass + self.hi_fail) / 2

    async def by_concurrency(self, upper: float | None, max_steps: int) -> None:
        limit, value, prev_tp, steps = upper or 1024, 1.0, 0.0, 0
        while steps < max_steps and not self.should_stop():  # doubling until it fails or reaches the limit
            steps += 1
            point = await self.run(value, "double")
            self._record(value, point)
            if not point.meets_slo or value >= limit:
                break
            if point.achieved_request_throughput < prev_tp * 1.05 and self.stopped is None:
                self.stopped = f"throughput stopped growing at concurrency {value:g}"
            prev_tp = max(prev_tp, point.achieved_request_throughput)
            value = min(limit, value * 2)
        while math.isfinite(self.hi_fail) and self.hi_fail - self.lo_pass > 1 and steps < max_steps \
                and not self.should_stop():
            steps += 1
            value = float(math.floor((self.lo_pass + self.hi_fail) / 2))
            self._record(value, await self.run(value, "bisect"))
        self.max_tp = max((p.achieved_request_throughput for p in self.curve), default=None)

    def runs_at(self, value: float) -> list[CurvePoint]:
        return [p for p in self.curve if p.value == value and p.phase != "probe"]

    async def confirm(self, repeats: int) -> float | None:
        """Re-run the boundary; a candidate that fails any repeat is dropped for the next lower passing value."""
        candidate = self.lo_pass if self.lo_pass > 0 else None
        for _ in range(3):
            if candidate is None or self.should_stop():
                break
            while len(self.runs_at(candidate)) < repeats and not self.should_stop():
                await self.run(candidate, "confirm")
            if all(p.meets_slo for p in self.runs_at(candidate)):
                break
            self.hi_fail = min(self.hi_fail, candidate)
            lower = [p.value for p in self.curve if p.meets_slo and p.value < candidate and p.phase != "probe"]
            candidate = max(lower) if lower else None
        if math.isfinite(self.hi_fail):
            while len(self.runs_at(self.hi_fail)) < repeats and not self.should_stop():
                await self.run(self.hi_fail, "confirm")
        return candidate


def _decided_by(slo_ms: dict[str, float], label: str, unit: str, capacity: float | None,
                pass_runs: list[CurvePoint], lowest_failing: float, fail_runs: list[CurvePoint]) -> list[str]:
    """Which target at which percentile held at the capacity (its slowest run) and which missed above it."""
    out = []
    for key, limit in slo_ms.items():
        seen = [p.latencies_ms[f"{label}_{key}"] for p in pass_runs if f"{label}_{key}" in p.latencies_ms]
        if capacity is not None and seen:
            out.append(f"at {capacity:g} {unit}: {label} {key} up to {max(seen):.1f} ms <= {limit:g} ms in every run")
    failing = next((p for p in fail_runs if not p.meets_slo), None)
    if failing is not None:
        out.append(f"at {lowest_failing:g} {unit}: {'; '.join(failing.violations)}")
    return out


async def search_capacity(measure: Measure, *, variable: SearchVariable, slo_ms: dict[str, float], pct: float,
                          upper: float | None, probe_concurrency: int, max_steps: int = 7, repeats: int = 2,
                          tolerance: float = 0.1, should_stop: Callable[[], bool] = lambda: False) -> CapacityResult:
    s = _Search(measure, variable, slo_ms, pct, should_stop)
    if variable == "rate":
        await s.by_rate(upper, probe_concurrency, max_steps, tolerance)
    else:
        await s.by_concurrency(upper, max_steps)
    capacity = await s.confirm(repeats)
    pass_runs = s.runs_at(capacity) if capacity is not None else []
    fail_runs = s.runs_at(s.hi_fail) if math.isfinite(s.hi_fail) else []
    passes = f"{sum(p.meets_slo for p in pass_runs)}/{len(pass_runs)}" if pass_runs else None
    fails = f"{sum(not p.meets_slo for p in fail_runs)}/{len(fail_runs)}" if fail_runs else None
    unit = "req/s" if variable == "rate" else "concurrent requests"
    label = percentile_label(pct)
    if capacity is None:
        confidence = f"no tested {variable} met the SLO; the server misses it even at the lowest load tried"
    else:
        tail = f"; {s.hi_fail:g} {unit} failed in {fails} runs" if fails else "; no failing load was found"
        sizes = min(p.completed for p in pass_runs)
        confidence = f"{capacity:g} {unit} met the SLO in {passes} runs{tail}. Each run had at least {sizes} requests"
        if sizes < 200 and pct >= 99:
            confidence += "; below about 200 requests a p99 is unstable, so treat the boundary as approximate"
    decided = _decided_by(slo_ms, label, unit, capacity, pass_runs, s.hi_fail, fail_runs)
    cap_tp = max((p.achieved_request_throughput for p in pass_runs), default=None)
    measured = [p for p in s.curve if p.phase != "probe"]
    return CapacityResult(variable=variable, slo_ms=slo_ms, slo_percentile=pct, capacity=capacity,
                          capacity_request_throughput=cap_tp,
                          lowest_failing=s.hi_fail if math.isfinite(s.hi_fail) else None, max_throughput=s.max_tp,
                          passes_at_capacity=passes, fails_at_lowest_failing=fails, confidence=confidence,
                          knee=knee(measured, pct), curve=s.curve,
                          stopped_early="cancelled" if should_stop() else s.stopped, decided_by=decided)
