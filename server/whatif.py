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
    if await user_confirms(ctx, f"Calibrate what_if by sending a short probe load to {base} (about 290 requests "
                                "at concurrency 4-32)? This loads a live server."):
        return request.model_copy(update={"confirm": True})
    return request


def register(mcp: MCPServer[Any]) -> None:
    async def _run(request: WhatIfInput, ctx: Context) -> WhatIfOutput:
        return await what_if(await _confirm_probe(request, ctx))

    add_model_tool(
        mcp, name="what_if", title="Predict a flag or load change before restarting the server",
        description=(
            "Answer 'if I set --max-num-batched-tokens 8192 / --max-num-seqs 64 / double the traffic, what happens "
            "to TTFT, ITL and throughput?' WITHOUT restarting or loading the server: a simulation of vLLM V1's "
            "scheduler (chunked prefill, max_num_seqs, KV blocks, preemption) with step times calibrated on this "
            "server. Calibrate from saved run_benchmark results (from_result, sends nothing), a saved calibration, "
            "or probe=true on url (sends ~290 requests at concurrency 4-32; non-loopback needs confirm=true, set only "
            "after the user agreed). Give the load (concurrency or rate, input_len, output_len) or reuse "
            "from_result's, and variants such as [{'max_num_batched_tokens': '8192'}, {'max_num_seqs': '64', "
            "'rate': '20'}]. Returns each variant in run_benchmark's result shape (simulated=true), a comparison "
            "table, and the calibration's residuals. Ask this before proposing a restart; verify the chosen change "
            "with run_benchmark afterwards."
        ),
        input_model=WhatIfInput, output_model=WhatIfOutput, run=_run, annotations=_MAY_PROBE,
    )
