"""`vllm-tune calibrate`: fit one hardware's fixed costs and efficiency from the user's saved benchmark results.

A result file (run_benchmark / `vllm-tune bench` / `plan --verify`) says what load it measured (provenance.workload,
provenance.load) and, in provenance.serve_flags_from_caller, how the server was started and on what: `hardware`
(a catalog name such as H100 or CPU), `model`, and the layout flags (tensor_parallel_size, pipeline_parallel_size,
data_parallel_size, max_num_seqs; `--flag` spellings are accepted too). `plan --verify` records all of them.
The fit replaces the per-step and per-request fixed costs and scales the efficiencies, keeping the rest of the
bundled fit; it is stored per hardware in the user config dir and named by every later plan on that hardware.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.models.catalog import get_gpu
from vllm_tune.tools.models.facts import GpuSpec, ModelFacts
from vllm_tune.tools.models.resolve import resolve_model
from vllm_tune.tools.parallel.fit import minimise
from vllm_tune.tools.parallel.io import Estimate
from vllm_tune.tools.parallel.params import (
    EstimatorParams,
    HardwareCalibration,
    calibration_path,
    load_params,
    save_calibration,
)
from vllm_tune.tools.parallel.predict import layout_of, memory_at, predict

PRIOR = 0.02  # pulls each calibrated constant (log space) towards the bundled value when runs cannot separate them
TPOT_WEIGHT = 0.3  # a run's TPOT counts less than its throughput (the figure plans rank by)


class CalibrationRun(BaseModel):
    """What one saved result measured, and on what."""

    path: str
    hardware: str
    model: str
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    max_num_seqs: int | None = None
    gpu_memory_gib: float | None = None
    input_len: int
    output_len: int
    concurrency: float | None = None
    rate: float | None = None
    output_tokens_per_s: float
    tpot_ms: float | None = None
    ttft_ms: float | None = None


class RunCheck(BaseModel):
    path: str
    measured_output_tokens_per_s: float
    before: float | None = Field(description="estimate with the bundled constants")
    after: float | None = Field(description="estimate with the calibration")
    measured_tpot_ms: float | None = None
    before_tpot_ms: float | None = None
    after_tpot_ms: float | None = None


class CalibrateOutput(BaseModel):
    hardware: str
    stored_at: str
    calibration: HardwareCalibration
    runs: list[RunCheck]


def _flag(flags: dict[str, str], name: str) -> str | None:
    for key, value in flags.items():
        if key.lstrip("-").replace("-", "_") == name:
            return value
    return None


def _int(value: str | None, what: str, path: Path) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise BadInputError(f"{path}: serve flag {what}={value!r} is not a whole number") from None


def read_run(path: Path, *, hardware: str | None = None, model: str | None = None) -> CalibrationRun:
    """One saved benchmark result as a calibration run; a clear error when it lacks what the fit needs."""
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{path}: not a readable result file ({exc})") from None
    prov = data.get("provenance")
    if not isinstance(prov, dict) or not isinstance(data.get("output_throughput"), (int, float)):
        raise BadInputError(f"{path}: not a benchmark result (no output_throughput / provenance)")
    flags = {str(k): str(v) for k, v in (prov.get("serve_flags_from_caller") or {}).items()}
    hw = hardware or _flag(flags, "hardware") or _flag(flags, "gpu")
    if not hw:
        raise BadInputError(f"{path}: the result does not say its hardware (serve flag hardware=...); pass --hardware")
    name = model or _flag(flags, "model") or prov.get("model")
    if not name:
        raise BadInputError(f"{path}: the result does not name its model; pass --model")
    workload = prov.get("workload") or {}
    load = prov.get("load") or {}
    if load.get("concurrency") is None and load.get("rate") is None:
        raise BadInputError(f"{path}: the result has neither a concurrency nor a rate")
    mem = _flag(flags, "gpu_memory_gib")
    return CalibrationRun(
        path=str(path), hardware=get_gpu(hw).name, model=str(name),
        tensor_parallel_size=_int(_flag(flags, "tensor_parallel_size"), "tensor_parallel_size", path) or 1,
        pipeline_parallel_size=_int(_flag(flags, "pipeline_parallel_size"), "pipeline_parallel_size", path) or 1,
        data_parallel_size=_int(_flag(flags, "data_parallel_size"), "data_parallel_size", path) or 1,
        max_num_seqs=_int(_flag(flags, "max_num_seqs"), "max_num_seqs", path),
        gpu_memory_gib=float(mem) if mem else None,
        input_len=int(workload.get("input_len") or 0) or 1, output_len=int(workload.get("output_len") or 0) or 1,
        concurrency=load.get("concurrency"), rate=load.get("rate"),
        output_tokens_per_s=float(data["output_throughput"]),
        tpot_ms=data.get("mean_tpot_ms"), ttft_ms=data.get("mean_ttft_ms"))


def _hardware(run: CalibrationRun) -> GpuSpec:
    gpu = get_gpu(run.hardware)
    if run.gpu_memory_gib:
        gpu = gpu.model_copy(update={"memory_gib": run.gpu_memory_gib})
    return gpu


def estimate_run(run: CalibrationRun, facts: ModelFacts, params: EstimatorParams,
                 calibration: HardwareCalibration | None) -> Estimate | None:
    gpu = _hardware(run)
    layout = layout_of(run.tensor_parallel_size, run.pipeline_parallel_size, run.data_parallel_size, 1,
                       moe=facts.moe is not None)
    max_len = min(facts.max_position_embeddings, max(run.input_len + run.output_len, 256))
    mem = memory_at(facts, gpu, layout, isl=run.input_len, osl=run.output_len, max_model_len=max_len)
    return predict(facts, gpu, layout, mem, isl=run.input_len, osl=run.output_len, concurrency=run.concurrency,
                   rate=run.rate if run.concurrency is None else None, params=params, calibration=calibration,
                   max_num_seqs=run.max_num_seqs)


def _candidate(hardware: str, x: list[float], runs: list[str]) -> HardwareCalibration:
    return HardwareCalibration(hardware=hardware, step_fixed_ms=math.exp(x[0]), seq_fixed_us=math.exp(x[1]),
                               efficiency_scale=min(100.0, max(0.01, math.exp(x[2]))), runs=runs)


def calibrate(paths: list[Path], *, hardware: str | None = None, model: str | None = None,
              offline: bool = True, save: bool = True) -> CalibrateOutput:
    """Fit and store the calibration of one hardware from saved results measured on it."""
    if not paths:
        raise BadInputError("give at least one result file")
    runs = [read_run(p, hardware=hardware, model=model) for p in paths]
    kinds = {r.hardware for r in runs}
    if len(kinds) > 1:
        raise BadInputError(f"the results come from different hardware ({', '.join(sorted(kinds))}); calibrate "
                            "one at a time")
    hw = runs[0].hardware
    base = load_params()
    facts = {r.model: resolve_model(r.model, offline=offline) for r in runs}
    names = [r.path for r in runs]
    x0 = [math.log(max(base.step_fixed_ms, 1e-3)), math.log(max(base.seq_fixed_us, 1e-3)), 0.0]

    def objective(x: list[float]) -> float:
        cal = _candidate(hw, x, names)
        total = 0.0
        for r in runs:
            est = estimate_run(r, facts[r.model], base, cal)
            if est is None:
                return 1e9
            total += math.log(est.output_tokens_per_s / r.output_tokens_per_s) ** 2
            if r.tpot_ms:
                total += TPOT_WEIGHT * math.log(est.tpot_ms / r.tpot_ms) ** 2
        return total + PRIOR * sum((a - b) ** 2 for a, b in zip(x, x0, strict=True))

    x, _ = minimise(objective, x0, rounds=3, iters=400)
    cal = _candidate(hw, x, names)
    checks: list[RunCheck] = []
    for r in runs:
        before = estimate_run(r, facts[r.model], base, None)
        after = estimate_run(r, facts[r.model], base, cal)
        checks.append(RunCheck(path=r.path, measured_output_tokens_per_s=r.output_tokens_per_s,
                               before=before.output_tokens_per_s if before else None,
                               after=after.output_tokens_per_s if after else None, measured_tpot_ms=r.tpot_ms,
                               before_tpot_ms=before.tpot_ms if before else None,
                               after_tpot_ms=after.tpot_ms if after else None))
    from vllm_tune.tools.bench.provenance import utc_now

    cal = cal.model_copy(update={
        "residuals_before": [round(abs(c.before / c.measured_output_tokens_per_s - 1), 4) for c in checks
                             if c.before],
        "residuals_after": [round(abs(c.after / c.measured_output_tokens_per_s - 1), 4) for c in checks if c.after],
        "fitted_utc": utc_now()})
    where = save_calibration(cal) if save else calibration_path()
    return CalibrateOutput(hardware=hw, stored_at=str(where), calibration=cal, runs=checks)
