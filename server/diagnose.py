"""diagnose_metrics over MCP: read-only, open-world (live data), with progress during the scrape window."""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.diagnose.api import DiagnoseInput, diagnose_metrics
from vllm_tune.tools.diagnose.models import DiagnoseOutput
from vllm_tune.tools.diagnose.report import render_report
from vllm_tune.tools.net.targets import TargetPolicy

# Reads metrics only, changes nothing; the same call later sees different live data; reaches network targets.
_ANNOTATIONS = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=False,
                               open_world_hint=True)

DESCRIPTION = (
    "Why is a vLLM deployment slow? Reads /metrics over a window (live url, Prometheus range, saved captures, "
    "a run_id) and names the bottleneck by the knowledge base's triage rules, with evidence, actions and "
    "knowledge ids; slo at slo_percentile is met, violated or undecided (histogram bounds)."
)


def register(mcp: MCPServer[Any]) -> None:
    async def _run(request: DiagnoseInput, ctx: Context) -> DiagnoseOutput:
        async def progress(done: float, total: float, message: str) -> None:
            await ctx.report_progress(done, total, message)

        # The MCP tool never auto-allows the URL it is given: only the environment allowlist and loopback.
        return await diagnose_metrics(request, policy=TargetPolicy.from_env(), progress=progress)

    add_model_tool(mcp, name="diagnose_metrics", title="Diagnose a vLLM deployment",
                   description=DESCRIPTION, input_model=DiagnoseInput, output_model=DiagnoseOutput, run=_run,
                   annotations=_ANNOTATIONS, summarize=render_report,
                   advanced=("prometheus_end", "sample_interval_s", "captured_window_s", "serve_flags", "model",
                             "results_dir"))
