"""tune_moe over MCP: fused-MoE config names, coverage, log reading, tuning (confirmed, budgeted) and verification."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

from vllm_tune.server.confirm import user_confirms
from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.bench.vllm_bench import ENV_PYTHON as ENV_VLLM_PYTHON
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.api import MoeInput, MoeOutput, local_gpu_names, run_moe
from vllm_tune.tools.moe.render import render_text

log = logging.getLogger(__name__)

# mode=tune occupies GPUs for up to the budget and writes a config file, so the tool as a whole is not read-only.
_TUNE_MOE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)


def _question(request: MoeInput) -> str:
    return (f"Tune fused-MoE kernel configs for {request.model} on {request.gpu} (TP {request.tp}, DP {request.dp},"
            f" EP {'on' if request.ep else 'off'})? This occupies the GPU(s) for up to "
            f"{request.budget_minutes or 0:g} minutes and writes a config file.")


def operator_python(request: MoeInput) -> MoeInput:
    """vllm_python names a program this server runs, so over MCP only the operator's choice is used: the one in
    VLLM_TUNE_VLLM_PYTHON (also when the caller leaves it unset); any other path is refused."""
    theirs = os.environ.get(ENV_VLLM_PYTHON) or None
    if request.vllm_python and request.vllm_python != theirs:
        raise BadInputError(f"vllm_python runs a program, so over MCP only the operator's {ENV_VLLM_PYTHON} is "
                            "used; leave vllm_python unset")
    return request.model_copy(update={"vllm_python": theirs})


def register(mcp: MCPServer[Any]) -> None:
    async def _run(request: MoeInput, ctx: Context) -> MoeOutput:
        request = operator_python(request)
        # Only ask when a job could actually start here; otherwise tune returns the plan and the reason anyway.
        can_run = request.backend != "triton" or bool(await anyio.to_thread.run_sync(local_gpu_names))
        wants = request.mode == "tune" and not request.confirm and request.budget_minutes is not None
        if wants and can_run and await user_confirms(ctx, _question(request)):
            request = request.model_copy(update={"confirm": True})
        cancel = threading.Event()

        def progress(done: int, total: int, message: str) -> None:
            try:
                anyio.from_thread.run(ctx.report_progress, done, total, message)
            except Exception:  # progress is best effort; never fail the tuning job over it
                log.debug("progress report failed", exc_info=True)

        try:
            return await anyio.to_thread.run_sync(lambda: run_moe(request, progress=progress, cancel=cancel),
                                                  abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancel.set()
            raise

    add_model_tool(
        mcp, name="tune_moe", title="Fused-MoE kernel configs",
        description=(
            "Fused-MoE kernel configs for a model, GPU and layout: the file name vLLM looks for, whether it is "
            "tuned, shipped or missing, nearest ones. check/plan read only; tune runs the GPU for budget_minutes "
            "(confirm=true after the user agreed); verify checks vLLM loads it and compares A/B results."
        ),
        input_model=MoeInput, output_model=MoeOutput, run=_run, annotations=_TUNE_MOE, summarize=render_text,
        advanced=("tuned_folder", "batch_sizes", "vllm_version", "vllm_python", "output_dir", "backend", "search",
                  "offline", "baseline_results", "tuned_results"),
    )
