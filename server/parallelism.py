"""Parallelism planner over MCP: the recommend_parallelism tool."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.parallel import PlanInput, PlanOutput, recommend_parallelism
from vllm_tune.tools.parallel.verify import verify_plan

# Read-only and repeatable unless verify_url is given (then it sends a short benchmark load to that server);
# open-world because an unknown model id is fetched from the Hugging Face hub.
_PLAN = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)


def register(mcp: MCPServer[Any]) -> None:
    async def _plan(request: PlanInput, ctx: Context) -> PlanOutput:
        await ctx.report_progress(0, 1, f"planning {request.model} on {request.gpus} x {request.gpu}")
        out = await anyio.to_thread.run_sync(recommend_parallelism, request)
        if request.verify_url is not None and out.feasible:
            await ctx.report_progress(0.5, 1, f"verifying {out.candidates[0].label()} against {request.verify_url}")
            out = out.model_copy(update={"verification": await verify_plan(out, request)})
        await ctx.report_progress(1, 1, out.summary)
        return out

    add_model_tool(
        mcp, name="recommend_parallelism", title="Recommend a vLLM parallel layout",
        description=(
            "Plan TP/PP/DP/EP for a model on N GPUs: layouts vLLM accepts that fit, ranked for the goal with "
            "estimated throughput/TTFT/TPOT (fitted to published measurements, residuals stated) and the exact "
            "`vllm serve` command. verify_url measures the top one on a running server (sends load)."
        ),
        input_model=PlanInput, output_model=PlanOutput, run=_plan, annotations=_PLAN,
        advanced=("revision", "offline", "gpus_per_node", "interconnect", "gpu_memory_gib", "gpu_bandwidth_tbs",
                  "kv_cache_dtype", "max_model_len", "gpu_memory_utilization", "vllm_version", "head_address",
                  "top", "estimator", "verify_prompts", "verify_save_result", "verify_confirm"),
    )
