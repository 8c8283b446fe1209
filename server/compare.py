"""Run comparison over MCP: compare_runs reads saved results and says better, worse or within noise."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.compare.api import CompareInput, CompareOutput, compare_runs
from vllm_tune.tools.compare.render import render_text

_READ_ONLY_LOCAL = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                   open_world_hint=False)


def register(mcp: MCPServer[Any]) -> None:
    async def _compare(request: CompareInput, ctx: Context) -> CompareOutput:
        # The bootstrap is CPU work (up to a few seconds for large runs); keep the event loop answering.
        return await anyio.to_thread.run_sync(compare_runs, request)

    add_model_tool(
        mcp, name="compare_runs", title="Compare benchmark runs (A/B)",
        description=(
            "Compare saved benchmark results before and after a change (a flag, a vLLM upgrade, a tuned MoE "
            "config): for each candidate against the baseline, per metric (TTFT, TPOT, ITL, E2EL mean and "
            "percentiles, request/output throughput, goodput) the values, delta, delta %, which direction is "
            "better and a verdict: better, worse, within-noise or not-comparable. Verdicts use a seeded "
            "bootstrap interval where both runs kept per-request values (basis=bootstrap), else a relative "
            "noise threshold (basis=threshold, weaker). Checks whether the runs are comparable (model, vLLM "
            "version, serve flags, workload lengths, dataset, endpoint, rate/concurrency, client host, "
            "client-limited runs, failed requests, too few requests for p99) and explains changes from the "
            "server's /metrics window when both runs recorded it. Accepts result JSON paths, run folders or "
            "run ids from run_benchmark, and plain `vllm bench serve --save-result` files. Reads files only. "
            "Cite the returned knowledge_ids."
        ),
        input_model=CompareInput, output_model=CompareOutput, run=_compare, annotations=_READ_ONLY_LOCAL,
        summarize=render_text,
    )
