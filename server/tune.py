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
        mcp, name="tune_start", title="Start a tuning session from a vllm serve command",
        description=(
            "Start an agent-driven tuning loop: give the base `vllm serve` command (pin the values of flags to tune, "
            "e.g. --max-num-seqs 64), the goal (latency: lower the SLO percentile; throughput: raise goodput), the "
            "SLO and the workload every trial is measured with. Returns the session with trial 0 (the baseline) "
            "waiting for measurement and `next_step` saying how: tune_run_trial, or restart the server yourself, "
            "run_benchmark with the arguments in the trial notes, then tune_record. Then alternate tune_next and "
            "measurement until `state` is done; tune_report gives the best command."
        ),
        input_model=TuneStartInput, output_model=TuneState, run=_in_thread(tune_start), annotations=_WRITES_SESSION,
    )
    add_model_tool(
        mcp, name="tune_next", title="Propose the next tuning trial",
        description="Propose one lever change from the best command so far: first what the diagnosis of the best "
                    "trial's /metrics window asks for, then the goal's usual levers; linted, never a repeat. Each "
                    "trial cites the knowledge entries behind it.",
        input_model=SessionRef, output_model=TuneState, run=_in_thread(tune_next), annotations=_WRITES_SESSION,
    )
    add_model_tool(
        mcp, name="tune_record", title="Attach a measured run to a tuning trial",
        description="Record the run_benchmark run (run id or result path) that measured a trial, or why it could not "
                    "be measured. The trial is compared with the best so far (compare_runs) and becomes the best "
                    "only when its objective is better beyond noise and it keeps the SLO.",
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
        description="Start vLLM here (loopback port) with the pending trial's command, measure it with the session "
                    "workload, stop it and record the result. It occupies the GPU(s) and needs confirmation "
                    "(asked through elicitation, or confirm=true after the user agreed). A trial whose server does "
                    "not start is recorded failed with the first error line of its log; a cancelled trial, or a "
                    "baseline that could not be started or measured, stays proposed to run again.",
        input_model=RunTrialInput, output_model=TuneState, run=_run, annotations=_RUNS_SERVER,
    )
    add_model_tool(
        mcp, name="tune_report", title="Report of a tuning session",
        description="All trials with their objective, verdict against the best and notes; `next_step` names the "
                    "best command and its change against the baseline; `server` is a trial server running for the "
                    "session (pid, port), if any.",
        input_model=SessionRef, output_model=TuneState, run=_in_thread(tune_report), annotations=_READS_SESSION,
    )
