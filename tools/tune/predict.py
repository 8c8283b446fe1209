"""Predicted gain of candidate trials: what_if, calibrated on the session's own measured runs.

The calibration is fitted on the baseline's saved result and on every measured trial that differs from
it only in levers what_if simulates (each run with its own flags, read from its command), so the step
costs come from the server being tuned, under the session workload. A candidate's prediction is the
measured objective of the trial it derives from times the simulated change: the simulation's own bias
cancels in the ratio. Its uncertainty is the calibration's largest residual on the objective's quantity.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.lint.flags import FlagTable
from vllm_tune.tools.tune.models import TrialPrediction, TuneState
from vllm_tune.tools.tune.propose import LEVERS, Candidate, lever_settings
from vllm_tune.tools.whatif.api import ENGINE_KEYS, engine_for, predict_with_kind
from vllm_tune.tools.whatif.calibrate import Calibration, calibrate_from_results, max_residual

# Levers whose effect the scheduler simulation models (the others: async scheduling, prefix caching, are not).
SIMULATED = tuple(flag for flag, lever in LEVERS.items() if lever.dest in ENGINE_KEYS)


@dataclass
class SessionCalibration:
    calibration: Calibration
    runs: list[str]  # result paths
    trials: list[int]


def _pinned(command: str, table: FlagTable) -> dict[str, str]:
    """The simulated levers the command pins, under what_if's names."""
    got = lever_settings(command, table, list(SIMULATED))
    return {LEVERS[flag].dest: value for flag, value in got.items() if value}


def calibrate(state: TuneState, table: FlagTable) -> tuple[SessionCalibration | None, str]:
    """A what_if calibration from the session's measured runs, or None and why not."""
    measured = [t for t in state.trials if t.status == "measured" and t.result_path]
    base = next((t for t in measured if t.derived_from is None), None)
    if base is None:
        return None, "no measured baseline run to calibrate what_if on"
    others = [lev for lev in state.levers if lev not in SIMULATED]
    base_rest = lever_settings(base.command, table, others)
    same = [t for t in measured if lever_settings(t.command, table, others) == base_rest]
    paths = [str(t.result_path) for t in same]
    try:
        cal = calibrate_from_results(paths, run_flags=[_pinned(t.command, table) for t in same])
    except (BadInputError, ValueError) as exc:  # ValueError: a result whose recorded load does not validate
        return None, f"what_if could not calibrate on the session's runs: {str(exc).splitlines()[0]}"
    return SessionCalibration(cal, paths, [t.id for t in same]), \
        f"what_if calibrated on trial(s) {', '.join(str(t.id) for t in same)}"


def predict(sc: SessionCalibration, state: TuneState, table: FlagTable, best_command: str,
            best_objective: float, cand: Candidate) -> TrialPrediction | None:
    """The candidate's predicted objective, or None when what_if cannot simulate its change."""
    if not cand.changes or any(flag not in SIMULATED for flag in cand.changes):
        return None
    cal = sc.calibration.model_copy(update={"engine": engine_for(sc.calibration, _pinned(best_command, table))})
    w = state.workload
    load = {"input_len": w.input_len, "output_len": w.output_len, "num_prompts": w.num_prompts, "seed": w.seed,
            "percentiles": sorted({50.0, 90.0, 99.0, state.slo_percentile}), "slo": dict(state.slo),
            **({"concurrency": w.concurrency} if w.concurrency else {"rate": w.rate})}
    changes = {LEVERS[flag].dest: value for flag, value in cand.changes.items()}
    try:
        before, after, kind = predict_with_kind(cal, changes, load=load, metric=state.objective)
    except (BadInputError, ValueError):  # a change or load the simulation cannot take: no prediction
        return None
    if not before:
        return None
    ratio = after / before
    change = ratio - 1.0
    return TrialPrediction(objective=best_objective * ratio, gain=-change if state.better_when == "lower" else change,
                           uncertainty=residual_bound(sc.calibration, state.objective), calibration_runs=sc.runs,
                           kind=kind)


def residual_bound(cal: Calibration, objective: str) -> float | None:
    """The calibration's largest residual on the objective's own quantity (TTFT for p99_ttft_ms, throughput for
    goodput)."""
    family = next((k for k in ("ttft", "tpot", "itl", "e2el") if f"_{k}_" in objective), "throughput")
    return max_residual(cal, [family])


_KIND = {"best case": "a best case: the session's runs cannot tell a cost this change needs",
         "worst case": "a worst case: the session's runs cannot tell a cost this change needs",
         "no bound": "neither estimate nor bound: the session's runs cannot tell costs this change needs"}


def describe(p: TrialPrediction, objective: str) -> str:
    bound = "no residuals to bound it" if p.uncertainty is None else \
        f"±{p.uncertainty:.0%}, the calibration's largest residual on this quantity"
    kind = f"; {_KIND[p.kind]}" if p.kind in _KIND else ""
    return f"what_if predicts {objective} {p.objective:.4g} (gain {p.gain:+.0%}; {bound}{kind})"


def predicted_line(p: TrialPrediction) -> str:
    """Predicted next to measured, for the report."""
    bound = "" if p.uncertainty is None else f" ±{p.uncertainty:.0%}"
    if p.kind != "estimate":
        bound += f" ({p.kind})"
    if p.measured is None:
        return f"what_if predicted {p.objective:.4g}{bound} (gain {p.gain:+.0%}); not measured"
    off = "" if p.error is None else f", prediction {p.error:+.0%} off"
    return f"what_if predicted {p.objective:.4g}{bound} (gain {p.gain:+.0%}); measured {p.measured:.4g}{off}"
