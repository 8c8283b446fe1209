"""The tuning loop over MCP: start, next, record, run a trial (confirmed), report."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

from vllm_tune.server.confirm import user_confirms
from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.tune.api import tune_next, tune_record, tune_report, tune_run_trial, tune_start
from vllm_tune.tools.tune.models import RecordInput, RunTrialInput, SessionRef, TuneStartInput, TuneState
from vllm_tune.tools.tune.session import load

In = TypeVar("In", TuneStartInput, SessionRef, RecordInput)

# Session steps write the session file and nothing else.
_WRITES_SESSION = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                  open_world_hint=False)
_READS_SESSION = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                 open_world_hint=False)
# Starts a vLLM server on this machine (GPU time) and sends it load; loopback only.
_RUNS_SERVER = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                               open_world_hint=False)


def _in_thread(fn: Callable[[In], TuneState]) -> Callable[[In, Context], Awaitable[TuneState]]:
    """Session steps read and write files (and lint, compare): off the event loop."""

    async def run(request: In, ctx: Context) -> TuneState:
        return await anyio.to_thread.run_sync(lambda: fn(request))

    return run


def register(mcp: MCPServer[Any]) -> None:
    add_model_tool(
        mcp, name="tune_start", title="Start a tuning session",
        description=(
            "Start a tuning loop: base `vllm serve` command (pin the flags to tune), goal (latency or throughput), SLO "
            "and workload. Returns trial 0 (baseline) to measure; next_step says how. Then alternate tune_next and "
            "a measurement until state is done; tune_report gives the best command."
        ),
        input_model=TuneStartInput, output_model=TuneState, run=_in_thread(tune_start), annotations=_WRITES_SESSION,
        advanced=("env", "vllm_version", "gpu", "save_result"),
    )
    add_model_tool(
        mcp, name="tune_next", title="Propose the next tuning trial",
        description="Propose one lever change from the best command so far (what the best trial's diagnosis asks "
                    "for first, then the goal's levers), linted, never a repeat; cites knowledge ids.",
        input_model=SessionRef, output_model=TuneState, run=_in_thread(tune_next), annotations=_WRITES_SESSION,
    )
    add_model_tool(
        mcp, name="tune_record", title="Record a trial measurement",
        description="Record the run_benchmark run (run id or path) that measured a trial, or why it could not be "
                    "measured; it becomes the best only if better beyond noise and within the SLO.",
        input_model=RecordInput, output_model=TuneState, run=_in_thread(tune_record), annotations=_WRITES_SESSION,
    )

    async def _run(request: RunTrialInput, ctx: Context) -> TuneState:
        if not request.confirm:
            state = load(request.session_id, request.save_result)
            pending = next((t for t in state.trials if t.status == "proposed"), None)
            what = f"`{pending.command}`" if pending else "the pending trial"
            if await user_confirms(ctx, f"Start vLLM on this machine with {what}, load it with the session's "
                                        "workload, then stop it?"):
                request = request.model_copy(update={"confirm": True})
        cancel = threading.Event()
        try:
            # abandon: the cancel reaches us at once; the flag then stops the trial server in the worker thread
            return await anyio.to_thread.run_sync(lambda: tune_run_trial(request, cancel=cancel),
                                                  abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancel.set()
            raise

    add_model_tool(
        mcp, name="tune_run_trial", title="Run a tuning trial on this machine",
        description="Start vLLM here (loopback port) with the pending trial's command, measure, stop and record "
                    "it. Occupies the GPU; needs confirm=true after the user agreed. A cancelled trial stays "
                    "proposed.",
        input_model=RunTrialInput, output_model=TuneState, run=_run, annotations=_RUNS_SERVER,
    )
    add_model_tool(
        mcp, name="tune_report", title="Report of a tuning session",
        description="All trials with objective, verdict and notes; next_step names the best command; server is "
                    "a trial server still running, if any.",
        input_model=SessionRef, output_model=TuneState, run=_in_thread(tune_report), annotations=_READS_SESSION,
    )
