"""The estimator's fitted constants (knowledge/calibration/plan-estimator.yaml) and user calibrations.

The bundled file is written by scripts/fit_plan_estimator.py from the measured-results table
(knowledge/measured); tests re-run that fit and check the file is what the data gives. A user calibration
(`vllm-tune calibrate`, stored in the user config dir) overrides the per-step cost and scales the efficiencies
of one hardware name.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vllm_tune.tools.errors import KnowledgeError

FIT_FILE = Path(__file__).resolve().parents[2] / "knowledge" / "calibration" / "plan-estimator.yaml"


class Residuals(BaseModel):
    """|estimate/measured - 1| over the rows a fit used."""

    model_config = ConfigDict(extra="forbid")

    points: int
    median: float
    p90: float
    worst: float
    kind: str = Field(description="in-sample (rows the fit saw) or leave-one-out")


class EstimatorParams(BaseModel):
    """Constants of the step-time model; efficiencies are shares of datasheet peaks."""

    model_config = ConfigDict(extra="forbid")

    bw_efficiency: float = Field(gt=0, le=1.5, description="share of peak HBM bandwidth a decode step reaches")
    flops_efficiency: dict[str, float] = Field(description="share of the dense tensor-core peak, per compute dtype")
    step_fixed_ms: float = Field(ge=0, description="per decode step: scheduler, sampler, input prep (CPU side)")
    layer_fixed_us: float = Field(ge=0, description="per layer and step: kernel launches and small ops")
    moe_layer_fixed_us: float = Field(default=0.0, ge=0, description="extra per MoE layer and step: routing, "
                                                                     "permutation, grouped-GEMM launches")
    seq_fixed_us: float = Field(default=0.0, ge=0, description="per running request and step: scheduling, sampling, "
                                                               "detokenising (CPU side)")
    tp_loss: float = Field(ge=0, description="per-GPU efficiency is divided by 1 + tp_loss * log2(TP)")
    allreduce_latency_us: dict[str, float] = Field(description="one small all-reduce, per link kind")
    link_efficiency: float = Field(gt=0, le=1, description="share of the per-direction link bandwidth reached")
    moe_efficiency: float = Field(default=1.0, gt=0, le=1.5,
                                  description="MoE models: grouped-GEMM and routing efficiency relative to dense")
    family_scale: dict[str, float] = Field(default_factory=dict,
                                           description="efficiency multiplier per GPU family (1 when absent)")
    engine_scale: dict[str, float] = Field(default_factory=dict,
                                           description="throughput multiplier per engine relative to vLLM")
    residuals: Residuals | None = Field(default=None, description="output tok/s residuals")
    latency_residuals: Residuals | None = Field(default=None, description="TPOT / static-batch latency residuals")
    fitted_rows: list[str] = Field(default_factory=list)
    method: str = ""
    source: str = Field(default="", description="where these values come from")

    def flops_eff(self, dtype: str) -> float:
        return self.flops_efficiency.get(dtype) or self.flops_efficiency.get("bf16", 0.5)

    def uncertainty(self) -> str:
        r = self.residuals
        if r is None or r.points < 5:
            return "not enough measured data to bound this estimate"
        text = (f"|estimate/measured - 1| of the fitted model, {r.kind}: output tok/s on {r.points} published "
                f"measurements median {r.median:.0%}, p90 {r.p90:.0%}, worst {r.worst:.0%}")
        lat = self.latency_residuals
        if lat is not None and lat.points >= 5:
            text += f"; TPOT/latency on {lat.points}: median {lat.median:.0%}, p90 {lat.p90:.0%}"
        return text


# Used only when the fit file is missing (a broken install); the plan says so in its uncertainty line.
FALLBACK = EstimatorParams(
    bw_efficiency=0.7, flops_efficiency={"bf16": 0.5, "fp8": 0.5, "fp4": 0.5}, step_fixed_ms=1.0,
    layer_fixed_us=10.0, tp_loss=0.1, allreduce_latency_us={"nvlink": 15.0, "xgmi": 25.0, "pcie": 40.0,
                                                             "unknown": 40.0},
    link_efficiency=0.5, source="built-in fallback (no fit file)")


def load_params(path: Path | None = None) -> EstimatorParams:
    """The fitted estimator constants; the bundled file unless a path is given."""
    if path is None:
        return _bundled()
    return _read(path)


def _read(path: Path) -> EstimatorParams:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise KnowledgeError(f"estimator fit {path} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        raise KnowledgeError(f"estimator fit {path} has no 'params' mapping")
    try:
        return EstimatorParams.model_validate({**data["params"], "residuals": data.get("residuals"),
                                               "latency_residuals": data.get("latency_residuals"),
                                               "fitted_rows": data.get("rows", []),
                                               "method": str(data.get("method", "")),
                                               "source": f"fitted: {path.name}"})
    except ValidationError as exc:
        raise KnowledgeError(f"estimator fit {path}: {exc.errors()[0]['msg']}") from exc


@functools.cache
def _bundled() -> EstimatorParams:
    if not FIT_FILE.exists():
        return FALLBACK
    return _read(FIT_FILE)


def gpu_family(name: str) -> str:
    """Architecture family of a catalog GPU name; efficiencies are fitted per family."""
    n = name.upper()
    if n.startswith("A100") or n.startswith("A10") or n.startswith("A30"):
        return "ampere"
    if n.startswith(("H100", "H200", "H20", "GH200")):
        return "hopper"
    if n.startswith(("B200", "B300", "GB200", "GB300")):
        return "blackwell"
    if n.startswith(("L40", "L4")):
        return "ada"
    if n.startswith("RTX-PRO"):
        return "blackwell-workstation"
    if n.startswith(("MI300", "MI325")):
        return "cdna3"
    if n.startswith("MI355"):
        return "cdna4"
    if n.startswith("CPU"):
        return "cpu"
    return "other"


# ----- user calibration (vllm-tune calibrate) ---------------------------------------------------------------


class HardwareCalibration(BaseModel):
    """Per-hardware corrections fitted from the user's own benchmark results."""

    model_config = ConfigDict(extra="forbid")

    hardware: str
    step_fixed_ms: float = Field(ge=0, description="replaces the fitted per-step fixed cost")
    seq_fixed_us: float = Field(ge=0, description="replaces the fitted per-request-and-step cost")
    efficiency_scale: float = Field(gt=0, description="multiplies bandwidth and FLOPS efficiencies")
    runs: list[str] = Field(description="result files it was fitted from")
    residuals_before: list[float] = Field(default_factory=list, description="|est/meas - 1| with bundled values")
    residuals_after: list[float] = Field(default_factory=list, description="|est/meas - 1| after calibration")
    fitted_utc: str = ""


class CalibrationFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hardware: dict[str, HardwareCalibration] = Field(default_factory=dict)


def calibration_path() -> Path:
    """$XDG_CONFIG_HOME/vllm-tune/calibration.yaml (~/.config when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "vllm-tune" / "calibration.yaml"


def load_calibrations() -> CalibrationFile:
    path = calibration_path()
    if not path.exists():
        return CalibrationFile()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return CalibrationFile.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise KnowledgeError(f"calibration file {path} cannot be read: {exc}") from exc


def calibration_for(hardware: str) -> HardwareCalibration | None:
    return load_calibrations().hardware.get(hardware.upper())


def save_calibration(cal: HardwareCalibration) -> Path:
    current = load_calibrations()
    current.hardware[cal.hardware.upper()] = cal
    path = calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(current.model_dump(), sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return path
