"""The two acting modes of tune_moe: tune (long, writes files, needs confirmation) and verify."""

from __future__ import annotations

import importlib.util
import shlex
import threading
from pathlib import Path

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.api import MoeInput, TuneReport, VerifyReport, local_gpu_names
from vllm_tune.tools.moe.naming import normalize_device_name
from vllm_tune.tools.moe.shape import ResolvedShape
from vllm_tune.tools.moe.tuner import ProgressFn, tune
from vllm_tune.tools.moe.verify import AbMetric, compare_ab, lookup_like_vllm, lookup_with_real_vllm
from vllm_tune.tools.moe.writer import write_config
from vllm_tune.tools.surface import say


def _refusal(req: MoeInput, shape: ResolvedShape) -> str | None:
    if not req.confirm:
        return say(mcp="mode=tune occupies the GPU for up to the budget and writes a config file; confirm it "
                       "(confirm=true, only after the user agreed) to run",
                   cli="tuning occupies the GPU for up to the budget and writes a config file; confirm with --yes")
    if req.budget_minutes is None:
        return say(mcp="mode=tune needs a time budget (budget_minutes)",
                   cli="tuning needs a time budget (--budget MIN)")
    if req.backend != "triton":
        return None
    names = local_gpu_names()
    if not names:
        return (f"no GPU is visible on this machine (nvidia-smi lists none); run the tune command on a machine "
                f"with a {shape.gpu.full_name} and vLLM installed")
    local = {normalize_device_name(n) for n in names}
    if local != {shape.key.device_name}:
        return (f"this machine's GPUs ({', '.join(sorted(set(names)))}) are not the requested "
                f"{shape.gpu.full_name}; tiles tuned here would be saved under the wrong device name")
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
        return "vLLM and torch are not installed in this Python; the Triton timer calls vLLM's fused-MoE kernel"
    return None


def tune_action(req: MoeInput, shape: ResolvedShape, sizes: list[int], out_dir: str, *,
                progress: ProgressFn | None = None, cancel: threading.Event | None = None) -> TuneReport:
    reason = _refusal(req, shape)
    if reason is not None:
        return TuneReport(ran=False, reason=reason)
    assert req.budget_minutes is not None
    folder = Path(out_dir).expanduser()
    work = folder / ".vllm-tune-moe" / shape.key.file_name().removesuffix(".json")
    budget_s = req.budget_minutes * 60
    if req.backend == "triton":
        from vllm_tune.tools.moe.workers import run_parallel, visible_gpus

        result = run_parallel(shape.tune_shape, sizes, work_dir=work, gpus=visible_gpus() or ["0"], backend="triton",
                              level=req.search, budget_s=budget_s, progress=progress, cancel=cancel)
        best, times, errors = result.best, result.best_time_s, result.worker_errors
        measured, total, complete, stopped, ckpts = (result.measured, result.total, result.complete, result.stopped,
                                                     result.checkpoints)
    else:
        from vllm_tune.tools.moe.timers import make_timer

        ckpt = work / f"checkpoint-{req.backend}.json"
        res = tune(shape.tune_shape, sizes, make_timer(req.backend), checkpoint=ckpt, level=req.search,
                   budget_s=budget_s, progress=progress, cancel=cancel)
        best, times, errors = res.best, res.best_time_s, []
        measured, total, complete, stopped, ckpts = res.measured, res.total, res.complete, res.stopped, [str(ckpt)]
    written = str(write_config(folder, shape.key, best)) if best else None
    note = None if req.backend == "triton" else (
        f"{req.backend} is a test backend: the file has the right name and format but its tiles were not chosen on "
        "a GPU")
    micro = {bs: round(t * 1e6, 2) for bs, t in times.items()}
    return TuneReport(ran=True, backend=req.backend, written=written, measured=measured, total=total,
                      complete=complete, stopped=stopped, best_time_us=micro,
                      checkpoints=ckpts, errors=errors, reason=note)


def verify_action(req: MoeInput, shape: ResolvedShape, folder: str | None, package_dir: Path | None) -> VerifyReport:
    key = shape.key
    problems: list[str] = []
    if not folder:
        problems.append("no tuned folder given (tuned_folder or VLLM_TUNED_CONFIG_FOLDER); "
                        "only shipped configs checked")
    look = lookup_like_vllm(key, tuned_folder=folder, package_dir=package_dir)
    problems += look.problems
    if look.found_at and folder and not look.found_at.startswith(str(Path(folder))):
        problems.append(f"vLLM would load the shipped {look.found_at}, not a tuned file")
    real: dict[str, object] | None = None
    if req.vllm_python:
        got = lookup_with_real_vllm(req.vllm_python, key, gpu_full_name=shape.gpu.full_name, tuned_folder=folder)
        real = {"file_name": got.file_name, "batch_sizes": got.batch_sizes, "loaded_from": got.loaded_from,
                "log_lines": got.log_lines[-4:]}
        if got.file_name != key.file_name():
            problems.append(f"vLLM computes the name {got.file_name}, we computed {key.file_name()}")
    env = f"VLLM_TUNED_CONFIG_FOLDER={shlex.quote(folder or './moe_configs')}"
    plan = [
        f"A (baseline): start vLLM for {shape.model} with the production flags and no VLLM_TUNED_CONFIG_FOLDER; "
        "its log should show the default-config warning for this shape",
        f"B (tuned): restart with {env} and the same flags; its log must say 'Using configuration from' "
        f"{key.file_name()}",
        "run the same run_benchmark workload against each (at least two repeats per side, same seed and rate) and "
        "pass the result files as baseline_results / tuned_results",
        "accept the config only if throughput or TPOT moves by more than the reported noise",
    ]
    ab: list[AbMetric] = []
    if req.baseline_results or req.tuned_results:
        if not (req.baseline_results and req.tuned_results):
            raise BadInputError("give both baseline_results and tuned_results for the A/B comparison")
        ab = compare_ab(req.baseline_results, req.tuned_results)
    return VerifyReport(file=look.found_at, loaded_by_lookup=look.configs is not None,
                        batch_sizes=sorted(look.configs) if look.configs else [], problems=problems, real_vllm=real,
                        ab_plan=plan, ab_result=ab)
