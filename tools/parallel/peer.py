"""NVIDIA AIConfigurator (the `aic` extra) as a second estimator beside ours, where it covers model and GPU.

AIConfigurator estimates from kernel timings measured on each GPU (its `systems/data` databases) and needs the
model's config.json; with no hub access it only knows the configs it ships (`aiconfigurator_core/model_configs`).
It is imported here lazily, never at start-up.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vllm_tune.tools.models.facts import GpuSpec, ModelFacts
from vllm_tune.tools.parallel.io import Candidate, Layout, PeerEstimate

# Catalog GPU name -> AIConfigurator system name (aiconfigurator_core/systems/*.yaml).
AIC_SYSTEMS = {"A100": "a100_sxm", "H100": "h100_sxm", "H100-PCIE": "h100_pcie", "H200": "h200_sxm",
               "B200": "b200_sxm", "B300": "b300_sxm", "GB200": "gb200", "L40S": "l40s",
               "RTX-PRO-6000": "rtx_pro_6000_server"}
# Checkpoints whose architecture AIConfigurator ships under another id (same config.json shape; the
# Instruct / 3.3 releases reuse the base 3.1 architecture).
AIC_MODEL_ALIASES = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Llama-3.1-405B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-405B",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    "mistralai/Mixtral-8x22B-Instruct-v0.1": "mistralai/Mixtral-8x22B-v0.1",
    "Qwen/Qwen3-235B-A22B-FP8": "Qwen/Qwen3-235B-A22B-FP8",
}
GEMM_MODES = {"fp8": "fp8", "nvfp4": "nvfp4", "mxfp4": None}


def aic_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("aiconfigurator")
    except Exception:
        return None


def _configs_dir() -> Path | None:
    try:
        import aiconfigurator_core  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return Path(aiconfigurator_core.__file__).parent / "model_configs"


def aic_model_id(name: str) -> str | None:
    """The id AIConfigurator knows offline for a checkpoint, or None."""
    folder = _configs_dir()
    if folder is None:
        return None
    for candidate in (name, AIC_MODEL_ALIASES.get(name)):
        if candidate and (folder / f"{candidate.replace('/', '--')}_config.json").exists():
            return candidate
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """AIConfigurator logs and warns a lot on import and per call; keep our output clean."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    env = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)
        if env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = env


def coverage(facts: ModelFacts, gpu: GpuSpec) -> tuple[str, str] | str:
    """(model id, system) when AIConfigurator covers this pair, else why not."""
    if aic_version() is None:
        return "AIConfigurator is not installed (pip install 'vllm-tune[aic]')"
    system = AIC_SYSTEMS.get(gpu.name)
    if system is None:
        return f"AIConfigurator has no kernel database for {gpu.name}"
    model = aic_model_id(facts.name)
    if model is None:
        return f"AIConfigurator ships no config for {facts.name} (no hub access)"
    return model, system


def aic_point(facts: ModelFacts, gpu: GpuSpec, layout: Layout, *, isl: int, osl: int, batch: int,
              backend: str = "vllm") -> PeerEstimate:
    """AIConfigurator's aggregated-serving estimate for one replica of `layout` at `batch` requests in flight."""
    name = f"aiconfigurator {aic_version()}"
    where = coverage(facts, gpu)
    if isinstance(where, str):
        return PeerEstimate(estimator=name, note=where)
    model, system = where
    kwargs: dict[str, Any] = {"backend_name": backend, "isl": isl, "osl": osl, "batch_size": max(1, batch),
                              "tp_size": layout.tensor_parallel_size, "pp_size": layout.pipeline_parallel_size}
    if facts.moe is not None:
        if layout.enable_expert_parallel:
            kwargs.update(moe_ep_size=layout.expert_parallel_size, moe_tp_size=1,
                          attention_dp_size=layout.data_parallel_size)
        else:
            kwargs.update(moe_tp_size=layout.tensor_parallel_size * layout.data_parallel_size, moe_ep_size=1,
                          attention_dp_size=layout.data_parallel_size)
    gemm = GEMM_MODES.get(facts.quant.weight_dtype)
    if gemm is not None and "FP8" not in model and "NVFP4" not in model:
        kwargs["gemm_quant_mode"] = gemm
        if facts.moe is not None:
            kwargs["moe_quant_mode"] = gemm
    try:
        with _quiet():
            # Untyped optional extra: absent (import-not-found) or present without stubs (import-untyped).
            from aiconfigurator.cli.api import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
                cli_estimate,
            )

            res = cli_estimate(model, system, **kwargs)
    except Exception as exc:  # AIConfigurator raises plain RuntimeErrors (OOM, missing data)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return PeerEstimate(estimator=name, note=f"AIConfigurator: {first[:200]}")
    copies = layout.replicas * (1 if facts.moe is not None and layout.enable_expert_parallel
                                else (layout.data_parallel_size if facts.moe is None else 1))
    per_gpu = float(res.tokens_per_second_per_gpu)
    total = per_gpu * layout.gpus_used
    note = f"model config {model}, system {system}, backend {backend} {res.backend_version}, batch {batch}"
    if copies > 1:
        note += f", {copies} copies"
    return PeerEstimate(estimator=name, ttft_ms=float(res.ttft), tpot_ms=float(res.tpot), output_tokens_per_s=total,
                        output_tokens_per_s_per_gpu=per_gpu, note=note)


def aic_estimates(facts: ModelFacts, gpu: GpuSpec, cands: list[Candidate], *, isl: int,
                  osl: int) -> tuple[list[PeerEstimate | None], str | None]:
    """AIConfigurator beside each candidate at the candidate's own per-replica load; a note when not covered."""
    where = coverage(facts, gpu)
    if isinstance(where, str):
        return [None] * len(cands), where
    out: list[PeerEstimate | None] = []
    for c in cands:
        batch = round(c.estimate.concurrency_per_replica) if c.estimate is not None else 1
        if facts.moe is not None and c.data_parallel_size > 1:
            batch = max(1, batch)  # per attention-DP rank, as AIConfigurator counts it
        out.append(aic_point(facts, gpu, c, isl=isl, osl=osl, batch=batch))
    return out, None
