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
            "A/B of saved benchmark runs (run ids, folders, result files, vllm bench serve JSON): per metric the "
            "delta and a verdict (better, worse, within-noise) from a seeded bootstrap; says first when runs are "
            "not comparable and why."
        ),
        input_model=CompareInput, output_model=CompareOutput, run=_compare, annotations=_READ_ONLY_LOCAL,
        advanced=("percentiles", "metrics", "seed", "confidence", "resamples", "noise_threshold_pct",
                  "min_effect_pct", "results_dir"),
        summarize=render_text,
    )
