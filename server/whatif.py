"""what_if over MCP: predictions from a calibrated scheduler simulation; probing the server is confirmed."""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

from vllm_tune.server.confirm import user_confirms
from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.net.targets import TargetPolicy
from vllm_tune.tools.whatif.api import WhatIfInput, WhatIfOutput, what_if
from vllm_tune.tools.whatif.capacity import PROBE_REQUESTS

# Not read-only: with probe=true it sends a short load (asked for, and confirmed off loopback, like
# run_benchmark). Without probe it only reads saved files and computes.
_MAY_PROBE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                             open_world_hint=True)


async def _confirm_probe(request: WhatIfInput, ctx: Context) -> WhatIfInput:
    if not request.probe or request.confirm or request.url is None:
        return request
    policy = TargetPolicy.from_env()
    base = policy.check(request.url)
    if policy.is_loopback(base):
        return request
    if await user_confirms(ctx, f"Calibrate what_if by sending a short probe load to {base} (about "
                                f"{PROBE_REQUESTS} requests at concurrency 4-32, once more if the host's speed "
                                "moves under it)? This loads a live server."):
        return request.model_copy(update={"confirm": True})
    return request


def register(mcp: MCPServer[Any]) -> None:
    async def _run(request: WhatIfInput, ctx: Context) -> WhatIfOutput:
        return await what_if(await _confirm_probe(request, ctx))

    add_model_tool(
        mcp, name="what_if", title="Predict a flag or load change",
        description=(
            "Predict what a flag or load change does to TTFT, ITL and throughput: vLLM's scheduler simulated with "
            f"step times calibrated on this server (from_result sends nothing; probe=true sends ~{PROBE_REQUESTS} "
            "requests). "
            "Ask it before proposing a restart."
        ),
        input_model=WhatIfInput, output_model=WhatIfOutput, run=_run, annotations=_MAY_PROBE,
        advanced=("arrival", "burstiness", "max_concurrency", "trace", "duration_s", "seed", "percentiles",
                  "search_variable", "slo_percentile", "save_calibration"),
    )
