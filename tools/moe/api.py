"""tune_moe: one request/response pair shared by the CLI, --json output and the MCP tool."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from vllm_tune.tools.files import allowed, read_text
from vllm_tune.tools.moe.coverage import check_coverage, find_package_configs_dir, installed_vllm_version
from vllm_tune.tools.moe.logs import read_moe_log
from vllm_tune.tools.moe.naming import down_file_supported
from vllm_tune.tools.moe.search_space import DEFAULT_BATCH_SIZES, candidates
from vllm_tune.tools.moe.shape import ResolvedShape, resolve_shape
from vllm_tune.tools.moe.tuner import ProgressFn
from vllm_tune.tools.moe.verify import AbMetric

Mode = Literal["check", "plan", "tune", "verify"]
_MAX_LOG_BYTES = 64 * 1024 * 1024
SECONDS_PER_CANDIDATE_GUESS = 0.5
"""Rough wall time to compile and time one candidate on an H100-class GPU (our guess, not a measurement)."""


class MoeInput(BaseModel):
    model: str = Field(description="catalog id, local model dir, config.json path or Hugging Face id")
    gpu: str = Field(description="GPU type (H100, H200, B200, MI300X...) or the exact torch device name")
    tp: int = Field(default=1, ge=1, le=1024, description="tensor-parallel size")
    dp: int = Field(default=1, ge=1, le=1024, description="data-parallel size")
    ep: bool = Field(default=False, description="--enable-expert-parallel")
    dtype: str | None = Field(default=None, description="auto (from the checkpoint), bf16, fp8_w8a8, int8_w8a16, ...")
    log_file: str | None = Field(default=None, description="a vLLM server log to read for MoE config lines")
    log_text: str | None = Field(default=None, description="vLLM server log text (instead of log_file)")
    tuned_folder: str | None = Field(default=None, description="VLLM_TUNED_CONFIG_FOLDER (default: the env var)")
    mode: Mode = Field(default="check", description="check (read-only) | plan | tune (needs confirm + budget) | verify")
    batch_sizes: list[int] | None = Field(default=None, description="batch sizes to tune (default: vLLM's 18)")
    budget_minutes: float | None = Field(default=None, gt=0, le=24 * 60, description="hard time budget for tune")
    confirm: bool = Field(default=False, description="required for mode=tune: it runs the GPU for the budget")
    vllm_version: str | None = Field(default=None, description="vLLM version to check shipped configs for")
    vllm_python: str | None = Field(default=None, description="python of an environment with vLLM installed")
    output_dir: str | None = Field(default=None,
                                   description="where tune writes (default: tuned_folder or ./moe_configs)")
    backend: Literal["triton", "cpu", "cost-model"] = Field(
        default="triton",
        description="kernel timer; cpu and cost-model are test backends whose results mean nothing for a GPU")
    search: Literal["quick", "pruned", "full"] = Field(default="pruned", description="size of the tile search")
    baseline_results: list[str] = Field(default_factory=list, description="verify: result files without the config")
    tuned_results: list[str] = Field(default_factory=list, description="verify: result files with the config")
    offline: bool = Field(default=False, description="never contact the Hugging Face hub")

    @model_validator(mode="after")
    def _check(self) -> MoeInput:
        if self.log_file and self.log_text:
            raise ValueError("give log_file or log_text, not both")
        if self.batch_sizes is not None and (not self.batch_sizes or not all(1 <= b <= 1 << 20
                                                                              for b in self.batch_sizes)):
            raise ValueError("batch_sizes must be positive integers up to 1048576")
        return self


class NearestOut(BaseModel):
    file_name: str
    where: str
    relation: str
    meaning: str


class LogLine(BaseModel):
    kind: Literal["found", "default"]
    line_no: int
    file_name: str | None
    paths: list[str]
    matches_expected: bool | None = Field(description="whether the logged name is the one computed for this layout")


class LogReport(BaseModel):
    default_warnings: int
    found_lines: int
    lines: list[LogLine]
    summary: str


class TunePlan(BaseModel):
    batch_sizes: list[int]
    candidates_per_batch_size: dict[int, int]
    total_points: int
    estimated_minutes: float = Field(description=f"points x {SECONDS_PER_CANDIDATE_GUESS} s (a rough guess) / workers")
    workers: int
    output_file: str
    steps: list[str]


class TuneReport(BaseModel):
    ran: bool
    reason: str | None = None
    backend: str | None = None
    written: str | None = None
    measured: int = 0
    total: int = 0
    complete: bool = False
    stopped: str | None = None
    best_time_us: dict[int, float] = Field(default_factory=dict)
    checkpoints: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


class VerifyReport(BaseModel):
    file: str | None
    loaded_by_lookup: bool
    batch_sizes: list[int] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    real_vllm: dict[str, object] | None = Field(default=None, description="vLLM's own lookup, when vllm_python given")
    ab_plan: list[str]
    ab_result: list[AbMetric] = Field(default_factory=list)


class MoeOutput(BaseModel):
    model: str
    gpu: str
    device_name: str
    E: int
    N: int
    hidden_size: int
    top_k: int
    dtype: str | None
    block_shape: list[int] | None
    layout: str
    config_file_name: str
    down_config_file_name: str | None
    status: Literal["tuned", "shipped", "missing"]
    found_at: str | None
    covered_batch_sizes: list[int] = Field(description="batch sizes in the found file (empty when unknown)")
    searched: list[str]
    shipped_source: str | None
    nearest: list[NearestOut]
    meaning: str
    tune_command: str
    vllm_script_command: str
    log: LogReport | None = None
    plan: TunePlan | None = None
    tune: TuneReport | None = None
    verify: VerifyReport | None = None
    notes: list[str] = Field(default_factory=list)
    knowledge_ids: list[str]


def _read_log(req: MoeInput) -> str | None:
    if req.log_text is not None:
        return req.log_text
    if not req.log_file:
        return None
    return read_text(req.log_file, limit=_MAX_LOG_BYTES, what="log file", errors="replace")


def _log_report(text: str, expected: str) -> LogReport:
    findings = read_moe_log(text)
    lines = [LogLine(kind=e.kind, line_no=e.line_no, file_name=e.file_name, paths=e.paths,
                     matches_expected=None if e.file_name is None else e.file_name in (expected,
                     expected.removesuffix(".json") + "_down.json")) for e in findings.events]
    if not lines:
        summary = ("no fused-MoE config lines: either the server is not running the Triton fused-MoE path (CPU "
                   "builds, other MoE backends) or the log does not include start-up")
    elif findings.default_warnings:
        summary = (f"{findings.default_warnings} default-config warning(s): vLLM found no tuned config for the "
                   "listed shapes")
    else:
        summary = f"{findings.found_lines} tuned config(s) loaded"
    return LogReport(default_warnings=findings.default_warnings, found_lines=findings.found_lines, lines=lines,
                     summary=summary)


def _commands(req: MoeInput, shape: ResolvedShape, sizes: list[int], out_dir: str) -> tuple[str, str]:
    ours = ["vllm-tune", "moe", req.model, "--gpu", req.gpu, "--tp", str(req.tp)]
    if req.dp != 1:
        ours += ["--dp", str(req.dp)]
    if req.ep:
        ours.append("--ep")
    if req.dtype:
        ours += ["--dtype", req.dtype]
    ours += ["--mode", "tune", "--budget", f"{req.budget_minutes or 60:g}", "--tuned-folder", out_dir,
             "--batch-sizes", *map(str, sizes), "--yes"]
    # vLLM's script models only TP: an EP or TP x DP group is passed as its size in --tp-size.
    script = ["python", "benchmarks/kernels/benchmark_moe.py", "--model", req.model, "--tp-size",
              str(shape.layer.ep_size if req.ep else shape.layer.moe_tp_size)]
    if req.ep and shape.layer.ep_size > 1:
        script.append("--enable-expert-parallel")
    if shape.key.dtype in ("fp8_w8a8", "int8_w8a16", "int4_w4a16"):
        script += ["--dtype", shape.key.dtype]
    script += ["--tune", "--save-dir", out_dir, "--batch-size", *map(str, sizes)]
    return shlex.join(ours), shlex.join(script)


def local_gpu_names() -> list[str]:
    """Names of the GPUs this machine can see (nvidia-smi), [] when none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = [ln.strip() for ln in out.splitlines() if ln.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        idx = [int(v) for v in visible.split(",") if v.strip().isdigit()]
        names = [names[i] for i in idx if i < len(names)]
    return names


def run_moe(req: MoeInput, *, progress: ProgressFn | None = None, cancel: threading.Event | None = None) -> MoeOutput:
    from vllm_tune.tools.moe import actions

    # Folders named by the caller obey the file roots over MCP (the env's VLLM_TUNED_CONFIG_FOLDER is the operator's).
    for folder, what in ((req.tuned_folder, "tuned folder"), (req.output_dir, "output folder")):
        if folder:
            allowed(folder, what)
    shape = resolve_shape(model=req.model, gpu=req.gpu, tp=req.tp, dp=req.dp, ep=req.ep, dtype=req.dtype,
                          offline=req.offline)
    key = shape.key
    tuned = req.tuned_folder or os.environ.get("VLLM_TUNED_CONFIG_FOLDER") or None
    package_dir = find_package_configs_dir(req.vllm_python)
    version = req.vllm_version or (installed_vllm_version(package_dir) if package_dir else None)
    cov = check_coverage(key, tuned_folder=tuned, package_dir=package_dir, vllm_version=version)
    ids = ["moe.config-file-name", "moe.shape-under-tp-ep", "change.d14-device-name-normalisation",
           "moe.config-lookup-order", "env.vllm-tuned-config-folder"]
    notes = list(shape.notes)
    if cov.status == "missing":
        ids += ["triage.moe-default-config", "pitfall.moe-untuned-new-gpu"]
        meaning = ("vLLM will log the default-config warning for this layer and run generic tiles; tune this "
                   "shape on this GPU (mode=plan shows how) or copy the nearest config as a stop-gap")
    elif cov.status == "shipped":
        meaning = "vLLM ships a tuned config for this exact shape, GPU and dtype; nothing to do"
    else:
        meaning = "your tuned folder has this exact file; vLLM uses it before any shipped one"
    down = down_file_supported(version)
    if down:
        ids.append("moe.down-config-file")
    out_dir = req.output_dir or tuned or "./moe_configs"
    sizes = sorted(set(req.batch_sizes or DEFAULT_BATCH_SIZES))
    tune_cmd, script_cmd = _commands(req, shape, sizes, out_dir)
    out = MoeOutput(
        model=shape.model, gpu=shape.gpu.label, device_name=key.device_name, E=key.E, N=key.N,
        hidden_size=shape.tune_shape.hidden_size, top_k=shape.tune_shape.top_k, dtype=key.dtype,
        block_shape=list(key.block_shape) if key.block_shape else None, layout=shape.layer.explanation,
        config_file_name=key.file_name(), down_config_file_name=key.file_name(down=True) if down else None,
        status=cov.status, found_at=cov.found_at, covered_batch_sizes=cov.batch_sizes, searched=cov.searched,
        shipped_source=cov.shipped_source,
        nearest=[NearestOut(**vars(n)) for n in cov.nearest], meaning=meaning, tune_command=tune_cmd,
        vllm_script_command=script_cmd, notes=notes, knowledge_ids=ids)
    if shape.layer.ep_size > 1:
        ids.append("pitfall.moe-experts-not-divisible")
    text = _read_log(req)
    if text is not None:
        out.log = _log_report(text, key.file_name())
    if req.mode in ("plan", "tune"):
        ids += ["moe.tuning-method", "change.d13-benchmark-moe-shapes"]
        out.plan = _plan(shape, sizes, req, out_dir)
    if req.mode == "tune":
        out.tune = actions.tune_action(req, shape, sizes, out_dir, progress=progress, cancel=cancel)
    if req.mode == "verify":
        ids.append("moe.ab-verify-end-to-end")
        out.verify = actions.verify_action(req, shape, tuned or req.output_dir, package_dir)
    out.knowledge_ids = list(dict.fromkeys(ids))
    return out


def _plan(shape: ResolvedShape, sizes: list[int], req: MoeInput, out_dir: str) -> TunePlan:
    from vllm_tune.tools.moe.workers import visible_gpus

    per = {bs: len(candidates(shape.tune_shape, bs, req.search)) for bs in sizes}
    workers = max(1, len(visible_gpus()))
    total = sum(per.values())
    steps = [
        f"on a machine with a {shape.gpu.full_name} and vLLM installed, run the tune command (one worker per "
        "visible GPU; progress is checkpointed, so re-running resumes)",
        f"the result is {Path(out_dir) / shape.key.file_name()}",
        f"serve with VLLM_TUNED_CONFIG_FOLDER={out_dir} and check the log says 'Using configuration from'",
        "run mode=verify, then an A/B benchmark with and without the variable",
    ]
    return TunePlan(batch_sizes=sizes, candidates_per_batch_size=per, total_points=total,
                    estimated_minutes=round(total * SECONDS_PER_CANDIDATE_GUESS / 60 / workers, 1), workers=workers,
                    output_file=str(Path(out_dir) / shape.key.file_name()), steps=steps)
