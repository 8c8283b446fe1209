"""Parallelism planner over MCP: the recommend_parallelism tool."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.parallel import PlanInput, PlanOutput, recommend_parallelism

# Read-only and repeatable; open-world only because an unknown model id is fetched from the Hugging Face hub.
_PLAN = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)


def register(mcp: MCPServer[Any]) -> None:
    async def _plan(request: PlanInput, ctx: Context) -> PlanOutput:
        await ctx.report_progress(0, 1, f"planning {request.model} on {request.gpus} x {request.gpu}")
        out = await anyio.to_thread.run_sync(recommend_parallelism, request)
        await ctx.report_progress(1, 1, out.summary)
        return out

    add_model_tool(
        mcp, name="recommend_parallelism", title="Recommend a vLLM parallel layout",
        description=(
            "Plan how to serve a model with vLLM on N GPUs of one type: enumerates every tensor/pipeline/data/"
            "expert-parallel split, rejects the ones vLLM would refuse or that cannot fit in memory (each with "
            "the knowledge-base rule id), and ranks the rest for the goal (latency, throughput or balanced). "
            "Each candidate has the exact `vllm serve` command, a per-GPU memory breakdown, KV-cache capacity, "
            "a roofline ESTIMATE of TTFT/TPOT/tokens per second (not a measurement: verify with run_benchmark) "
            "and cited reasons and warnings. When one copy spans nodes, node_commands gives the command (and any "
            "environment) for each node, head first, using vLLM's multi-node data-parallel or --nnodes launch "
            "(a Ray cluster on versions without it); pass head_address to fill in the head node. "
            "If nothing fits it says what would (more GPUs, FP8, shorter "
            "context). Models: bundled catalog names (e.g. deepseek-r1, llama-3.1-70b), a local path, or a "
            "Hugging Face id, which is fetched from the hub (the only network access; set offline to avoid it). "
            "GPUs: short names such as H100, H200, B200, MI300X."
        ),
        input_model=PlanInput, output_model=PlanOutput, run=_plan, annotations=_PLAN,
    )
