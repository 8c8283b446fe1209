"""run_benchmark search_capacity with simulate: the SLO capacity predicted by what_if instead of measured.

The search is run_benchmark's own (same steps, same request counts per step, same repeats), with every
step simulated by the calibrated scheduler model, so nothing of the search load reaches the server.
`simulate` names the calibration as what_if takes it: a saved calibration file, saved run_benchmark
results (comma-separated), or `probe` (a short real load, allowed and confirmed like run_benchmark);
`,verify` adds one real run at the predicted capacity, reported next to the simulation of the same load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from vllm_tune.tools.bench.api import (
    MAX_CONCURRENCY,
    ProgressCallback,
    RunBenchmarkInput,
    RunBenchmarkOutput,
    check_target,
    run_benchmark,
)
from vllm_tune.tools.bench.capacity import CapacityResult, CurvePoint, evaluate
from vllm_tune.tools.bench.simulated import SimulatedSearch, VerifyRun
from vllm_tune.tools.bench.store import MAX_RESULT_BYTES, ResultStore, RunStatus, StatusWriter, new_run_id, results_dir
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.files import allowed, read_text
from vllm_tune.tools.net.targets import TargetPolicy
from vllm_tune.tools.whatif import heldout
from vllm_tune.tools.whatif.api import (
    WhatIfInput,
    calibrate_for,
    chunking_warning,
    engine_for,
    range_warnings,
    simulate_capacity,
)
from vllm_tune.tools.whatif.calibrate import DEFAULT_PROBE, Calibration, max_residual
from vllm_tune.tools.whatif.results import load_from_request, summarize
from vllm_tune.tools.whatif.simulate import EngineConfig, run

# What a default calibration probe sends (its measured requests; each point adds a warm-up or two).
PROBE_REQUESTS = sum(p.num_prompts for p in DEFAULT_PROBE)


@dataclass
class Spec:
    calibration: str | None = None
    from_result: list[str] = field(default_factory=list)
    probe: bool = False
    verify: bool = False

    @property
    def sends_load(self) -> bool:
        return self.probe or self.verify


def _is_calibration(path: str) -> bool:
    """A saved calibration rather than a result (read within the caller's file roots, like every file)."""
    p = allowed(path, "calibration or result")
    if p.is_dir() or p.suffix != ".json":
        return False
    try:
        data = json.loads(read_text(p, limit=MAX_RESULT_BYTES, what="calibration or result"))
    except ValueError:
        return False  # the result reader says what is wrong with it
    return isinstance(data, dict) and "step_model" in data


def parse_simulate(value: str) -> Spec:
    """'cal.json', 'run1,run2', 'probe', each optionally with ',verify'."""
    words = [w.strip() for w in value.split(",") if w.strip()]
    spec = Spec(verify="verify" in words, probe="probe" in words)
    files = [w for w in words if w not in ("verify", "probe")]
    if spec.probe and files:
        raise BadInputError("simulate: give either probe or saved files, not both")
    if not spec.probe and not files:
        raise BadInputError("simulate needs a calibration: a saved calibration file, saved run_benchmark results "
                            "(comma-separated), or 'probe' (sends a short load); add ',verify' for one real run")
    calibrations = [f for f in files if _is_calibration(f)]
    if calibrations and len(files) > 1:
        raise BadInputError("simulate: a saved calibration is used alone, not with other files")
    if calibrations:
        spec.calibration = calibrations[0]
    else:
        spec.from_result = files
    return spec


def _whatif_input(req: RunBenchmarkInput, spec: Spec) -> WhatIfInput:
    return WhatIfInput(url=req.url, calibration=spec.calibration, from_result=spec.from_result, probe=spec.probe,
                       confirm=req.confirm, serve_flags=dict(req.serve_flags), slo=dict(req.slo),
                       slo_percentile=req.slo_percentile, seed=req.seed)


def uncertainty(cal: Calibration, slo: dict[str, float]) -> tuple[float | None, str]:
    """The calibration's residuals on what the capacity depends on (the SLO's latencies and throughput), as
    what_if states them: a prediction is no closer than its fit."""
    runs = (cal.conditions.get("seen") or {}).get("runs")
    quantities = [*slo, "throughput"]
    bound = max_residual(cal, quantities)
    if bound is None:
        return None, "not enough data: the calibration has no residuals to bound the prediction by"
    text = (f"the calibration reproduces the {', '.join(quantities)} of its {runs or '?'} run(s) within {bound:.0%} "
            "(largest residual); the predicted capacity carries at least that error")
    if bound > 0.2:
        text += "; treat it as a rough estimate and verify it"
    return bound, text


def _search_request(req: RunBenchmarkInput) -> RunBenchmarkInput:
    """The load of each search step as run_benchmark builds it (each step sets its own rate or concurrency)."""
    return RunBenchmarkInput.model_validate({**req.model_dump(), "search_capacity": False, "simulate": None,
                                             "concurrency": 1, "rate": None, "num_prompts": req.search_prompts})


async def _verify(req: RunBenchmarkInput, cap: CapacityResult, engine: EngineConfig, cal: Calibration,
                  report: ProgressCallback | None, policy: TargetPolicy | None) -> VerifyRun:
    assert cap.capacity is not None
    value = cap.capacity
    shape: dict[str, Any] = {"rate": value, "concurrency": None} if cap.variable == "rate" else \
        {"concurrency": int(value), "rate": None}
    real = RunBenchmarkInput.model_validate({**_search_request(req).model_dump(), **shape,
                                             "label": req.label or f"verify {cap.variable}={value:g}"})
    out = await run_benchmark(real, report=report, policy=policy)
    assert out.result is not None
    measured_result = out.result.model_dump()
    load = load_from_request(real)  # the same schedule and seed the real run sent
    predicted_result = summarize(run(engine, cal.step_model, load), load, engine, cal.step_model,
                                 percentiles=[50.0, req.slo_percentile], slo_ms=req.slo)
    predicted = evaluate(predicted_result, cap.variable, value, "verify", req.slo, req.slo_percentile)
    measured = evaluate(measured_result, cap.variable, value, "verify", req.slo, req.slo_percentile)
    errors = _errors(predicted, measured)
    if measured.meets_slo:
        verdict = f"the measured run met the SLO at the predicted capacity {value:g}"
    else:
        verdict = (f"the measured run missed the SLO at the predicted capacity {value:g} "
                   f"({'; '.join(measured.violations)}): the prediction is optimistic here")
    return VerifyRun(variable=cap.variable, value=value, run_id=out.run_id, result_path=out.result_path,
                     predicted=predicted, measured=measured, relative_errors=errors, verdict=verdict)


def _errors(predicted: CurvePoint, measured: CurvePoint) -> dict[str, float]:
    pairs = {"request_goodput": (predicted.request_goodput, measured.request_goodput),
             "request_throughput": (predicted.achieved_request_throughput, measured.achieved_request_throughput),
             "output_throughput": (predicted.output_throughput, measured.output_throughput)}
    for key, got in measured.latencies_ms.items():
        pairs[key] = (predicted.latencies_ms.get(key), got)
    return {k: (float(p) - float(m)) / float(m) for k, (p, m) in pairs.items() if p is not None and m}


async def simulated_search(req: RunBenchmarkInput, *, report: ProgressCallback | None = None,
                           run_id: str | None = None, policy: TargetPolicy | None = None) -> RunBenchmarkOutput:
    """Predict the SLO capacity (no search load sent), optionally verified by one real run at it."""
    assert req.simulate is not None
    spec = parse_simulate(req.simulate)
    if spec.sends_load:
        check_target(req, policy)  # before the probe or the verify run sends anything
    store = ResultStore(results_dir(req.save_result))
    rid = run_id or new_run_id()
    writer = StatusWriter(store, RunStatus(run_id=rid, state="running", phase="calibrating"))
    writer.update(force=True)
    try:
        cal, _first = await calibrate_for(_whatif_input(req, spec))
        engine = engine_for(cal, req.serve_flags)
        bound, text = uncertainty(cal, req.slo)
        writer.update(force=True, phase="simulated capacity search")
        base = _search_request(req)
        batches: dict[float, float] = {}
        cap = await simulate_capacity(engine, cal, base, slo=req.slo, pct=req.slo_percentile,
                                      variable=req.search_variable, upper=req.search_max,
                                      probe_concurrency=req.concurrency or min(64, MAX_CONCURRENCY),
                                      repeats=req.search_repeats, num_prompts=req.search_prompts,
                                      seed_per_step=True, mean_batches=batches)
        sim = SimulatedSearch(calibration_source=spec.calibration or cal.source,
                              calibration_runs=(cal.conditions.get("seen") or {}).get("runs"),
                              max_abs_relative_error=cal.max_abs_relative_error, uncertainty_bound=bound,
                              uncertainty=text,
                              engine=engine.model_dump(), step_model=cal.step_model.model_dump())
        if cap.capacity is not None:
            at: dict[str, Any] = {"rate": cap.capacity, "concurrency": None} if cap.variable == "rate" else \
                {"concurrency": int(cap.capacity)}
            sim.warnings += range_warnings(cal, engine, base.model_copy(update=at), batches.get(cap.capacity))
        chunked = chunking_warning(cal, engine, base)
        if chunked:
            sim.warnings.append(chunked)
        sim.notes.append("simulated: no search load was sent; the scheduler model and what it leaves out are in "
                         "kb://entries/whatif.simplifications")
        held = heldout.note()
        if held:
            sim.notes.append(held)
        if spec.verify:
            if cap.capacity is None:
                sim.notes.append("nothing to verify: no load met the SLO in the simulation")
            else:
                writer.update(force=True, phase=f"verify run at {cap.variable}={cap.capacity:g}")
                sim.verify = await _verify(req, cap, engine, cal, report, policy)
        full = {"vllm_tune": {"run_id": rid, "kind": "capacity", "simulated": True},
                "capacity": cap.model_dump(mode="json"), "simulation": sim.model_dump(mode="json")}
        path = store.write_result(rid, full)
    except Exception as exc:
        writer.update(force=True, state="failed", message=str(exc)[:300])
        raise
    writer.update(force=True, state="completed", result_path=str(path), phase="done")
    warnings = [*sim.warnings]
    if bound is not None and bound > 0.2:
        warnings.append(f"the calibration reproduces its own runs only within {bound:.0%} on what the SLO and the "
                        "capacity depend on")
    return RunBenchmarkOutput(run_id=rid, state="completed", result_path=str(path), capacity=cap, simulation=sim,
                              warnings=warnings)
