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
    "Explain why a running vLLM deployment is slow. Scrapes the server's /metrics over a window (default 10 s, "
    "reporting progress), or reads a Prometheus range, saved /metrics texts and/or the server log; computes the "
    "workload (request rate, prompt/output lengths, concurrency via gauges or Little's law), latency percentiles "
    "(TTFT, ITL, TPOT, E2E, queue, prefill, decode; a bound such as '< 300 ms' where a histogram bucket only "
    "gives a bound, with the mean from _sum/_count), capacity (KV usage, "
    "preemptions, queue growth, running vs max_num_seqs) and named signals, then evaluates the knowledge base's "
    "triage rules. Returns a verdict, ranked findings (each id is a triage knowledge entry; evidence values with "
    "thresholds; actions citing knowledge ids; a note when a rule rests on an attributed claim), SLO status, "
    "abstentions when the data do not decide, caveats, and next steps (e.g. run_benchmark with the observed "
    "lengths and concurrency, tune_moe, recommend_parallelism). Pass slo {ttft, itl, tpot, e2el} in ms and "
    "slo_percentile (50/90/95/99, default 90) for a real SLO verdict (met, violated, or undecided when the bucket "
    "holding the percentile reaches the target), and serve_flags.max_num_seqs when known. Warm-up windows and a "
    "window_s that contradicts the captures are reported. Only loopback and VLLM_TUNE_ALLOWED_TARGETS are reachable."
)


def register(mcp: MCPServer[Any]) -> None:
    async def _run(request: DiagnoseInput, ctx: Context) -> DiagnoseOutput:
        async def progress(done: float, total: float, message: str) -> None:
            await ctx.report_progress(done, total, message)

        # The MCP tool never auto-allows the URL it is given: only the environment allowlist and loopback.
        return await diagnose_metrics(request, policy=TargetPolicy.from_env(), progress=progress)

    add_model_tool(mcp, name="diagnose_metrics", title="Diagnose a vLLM deployment from its metrics",
                   description=DESCRIPTION, input_model=DiagnoseInput, output_model=DiagnoseOutput, run=_run,
                   annotations=_ANNOTATIONS, summarize=render_report)
