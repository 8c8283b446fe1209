"""The `vllm serve` command line for a layout, using only flags the knowledge base knows for the target version."""

from __future__ import annotations

import shlex

from packaging.version import InvalidVersion, Version

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.parallel.io import Layout

FLAG_IDS = {
    "--tensor-parallel-size": "flag.tensor-parallel-size",
    "--pipeline-parallel-size": "flag.pipeline-parallel-size",
    "--data-parallel-size": "flag.data-parallel-size",
    "--enable-expert-parallel": "flag.enable-expert-parallel",
    "--max-model-len": "flag.max-model-len",
    "--kv-cache-dtype": "flag.kv-cache-dtype",
    "--quantization": "flag.quantization",
    "--gpu-memory-utilization": "flag.gpu-memory-utilization",
    "--distributed-executor-backend": "flag.distributed-executor-backend",
    "--data-parallel-size-local": "flag.data-parallel-size-local",
    "--data-parallel-start-rank": "flag.data-parallel-start-rank",
    "--data-parallel-address": "flag.data-parallel-address",
    "--data-parallel-rpc-port": "flag.data-parallel-rpc-port",
    "--headless": "flag.headless",
    "--nnodes": "flag.nnodes",
    "--node-rank": "flag.node-rank",
    "--master-addr": "flag.master-addr",
}

Args = list[tuple[str, str | None]]


def flag_valid(flag: str, vllm_version: str) -> bool:
    """True when the KB entry for `flag` applies to the version and the flag was not removed before it."""
    entry = load_knowledge().find(FLAG_IDS[flag])
    if entry is None or entry.flag is None:
        return False
    if not entry.applies_to.vllm.contains(vllm_version):
        return False
    if entry.flag.removed_in:
        try:
            return Version(vllm_version) < Version(entry.flag.removed_in)
        except InvalidVersion:
            return True
    return True


def check_version(vllm_version: str) -> None:
    try:
        Version(vllm_version)
    except InvalidVersion:
        raise BadInputError(f"vLLM version {vllm_version!r} is not a version number") from None


def serve_args(layout: Layout, *, max_model_len: int, kv_cache_dtype: str, quantization: str | None,
               gpu_memory_utilization: float) -> Args:
    """The layout's `vllm serve` flags, the same on every node."""
    args: Args = []
    if layout.tensor_parallel_size > 1:
        args.append(("--tensor-parallel-size", str(layout.tensor_parallel_size)))
    if layout.pipeline_parallel_size > 1:
        args.append(("--pipeline-parallel-size", str(layout.pipeline_parallel_size)))
    if layout.data_parallel_size > 1:
        args.append(("--data-parallel-size", str(layout.data_parallel_size)))
    if layout.enable_expert_parallel:
        args.append(("--enable-expert-parallel", None))
    args.append(("--max-model-len", str(max_model_len)))
    if kv_cache_dtype != "auto":
        args.append(("--kv-cache-dtype", kv_cache_dtype))
    if quantization:
        args.append(("--quantization", quantization))
    if abs(gpu_memory_utilization - 0.9) > 1e-9:
        args.append(("--gpu-memory-utilization", f"{gpu_memory_utilization:g}"))
    return args


def render_command(model: str, args: Args, vllm_version: str) -> tuple[str, list[str]]:
    """(command line, notes about flags left out because the target version lacks them)."""
    parts = ["vllm", "serve", shlex.quote(model)]
    dropped: list[str] = []
    for flag, value in args:
        if not flag_valid(flag, vllm_version):
            dropped.append(f"{flag} is not known for vLLM {vllm_version}; left out")
            continue
        parts.append(flag)
        if value is not None:
            parts.append(shlex.quote(value))
    return " ".join(parts), dropped


def build_command(model: str, layout: Layout, *, max_model_len: int, kv_cache_dtype: str, quantization: str | None,
                  gpu_memory_utilization: float, vllm_version: str) -> tuple[str, list[str]]:
    """Single-node command line and notes about flags left out."""
    args = serve_args(layout, max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, quantization=quantization,
                      gpu_memory_utilization=gpu_memory_utilization)
    return render_command(model, args, vllm_version)
