"""What a simulated capacity search (run_benchmark search_capacity with simulate) reports besides the search.

Models only, so that run_benchmark's output can carry them without importing what_if (which imports
run_benchmark); the search itself is tools/whatif/capacity.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from vllm_tune.tools.bench.capacity import CurvePoint, SearchVariable


class VerifyRun(BaseModel):
    """One real run at the predicted capacity, next to the simulation of the same load."""

    variable: SearchVariable
    value: float = Field(description="the predicted capacity, sent for real")
    run_id: str
    result_path: str | None = None
    predicted: CurvePoint = Field(description="the simulated run of exactly this load (same schedule and seed)")
    measured: CurvePoint
    relative_errors: dict[str, float] = Field(
        default_factory=dict, description="(predicted - measured) / measured for goodput, throughput and latencies")
    verdict: str = Field(description="whether the measured run met the SLO the prediction said it would meet")


class SimulatedSearch(BaseModel):
    simulated: bool = True
    calibration_source: str = Field(description="probe, results, metrics or a saved calibration file")
    calibration_runs: int | None = None
    max_abs_relative_error: float | None = Field(
        default=None, description="largest residual of the calibration on its own runs (None: no residuals)")
    uncertainty_bound: float | None = Field(
        default=None, description="largest residual on the SLO's latencies and throughput (relative)")
    uncertainty: str = Field(description="what the calibration's residuals say about the prediction")
    engine: dict[str, Any] = Field(description="the scheduler and KV settings simulated")
    step_model: dict[str, Any]
    verify: VerifyRun | None = None
    warnings: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
