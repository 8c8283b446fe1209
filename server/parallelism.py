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
            "Plan how to serve a model with vLLM on N GPUs of one type: enumerates every tensor/pipeline/data/"
            "expert-parallel split, rejects the ones vLLM would refuse or that cannot fit in memory (each with "
            "the knowledge-base rule id), and ranks the rest for the goal (latency, throughput or balanced). "
            "Each candidate has the exact `vllm serve` command, a per-GPU memory breakdown, KV-cache capacity, "
            "an ESTIMATE of TTFT/TPOT/tokens per second from a step-time model fitted to published measurements, "
            "with that fit's residuals as its uncertainty (not a measurement), "
            "and cited reasons and warnings. When one copy spans nodes, node_commands gives the command (and any "
            "environment) for each node, head first, using vLLM's multi-node data-parallel or --nnodes launch "
            "(a Ray cluster on versions without it); pass head_address to fill in the head node. "
            "If nothing fits it says what would (more GPUs, FP8, shorter "
            "context). Models: bundled catalog names (e.g. deepseek-r1, llama-3.1-70b), a local path, or a "
            "Hugging Face id, which is fetched from the hub (the only network access; set offline to avoid it). "
            "GPUs: short names such as H100, H200, B200, MI300X (CPU for vLLM's CPU backend). "
            "estimator='aic' or 'both' adds NVIDIA AIConfigurator's estimate per candidate where it covers the "
            "model and GPU (needs the aic extra). verify_url: a server already started with the first candidate's "
            "command; a short benchmark at the plan's workload is run against it and estimate vs measured is "
            "returned per metric (sends load; needs verify_confirm off loopback). Plans on hardware calibrated "
            "with `vllm-tune calibrate` use and name that calibration."
        ),
        input_model=PlanInput, output_model=PlanOutput, run=_plan, annotations=_PLAN,
    )
