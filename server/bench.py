"""run_benchmark over MCP: inline runs with progress, background runs with run ids, status, results, cancel."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent, ToolAnnotations

from vllm_tune.server.confirm import user_confirms
from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.bench.api import (
    BenchmarkResultsOutput,
    CancelOutput,
    ResultsRef,
    RunBenchmarkInput,
    RunBenchmarkOutput,
    RunRef,
    benchmark_status,
    check_target,
    load_results,
    run_benchmark,
)
from vllm_tune.tools.bench.render import render_saved, render_summary
from vllm_tune.tools.bench.store import ResultStore, RunStatus, new_run_id, results_dir
from vllm_tune.tools.net.targets import TargetPolicy
from vllm_tune.tools.whatif.capacity import PROBE_REQUESTS, parse_simulate

log = logging.getLogger(__name__)

_SENDS_LOAD = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                              open_world_hint=True)
_READS_RESULTS = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                 open_world_hint=False)
_CANCELS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                           open_world_hint=False)


@dataclass
class _Background:
    task: asyncio.Task[RunBenchmarkOutput]
    stop: list[bool] = field(default_factory=lambda: [False])


_RUNS: dict[str, _Background] = {}


async def start_background(request: RunBenchmarkInput) -> RunBenchmarkOutput:
    if request.simulate is None or parse_simulate(request.simulate).sends_load:
        check_target(request)  # refuse bad targets now, not in the background
    rid = new_run_id()
    flag = [False]

    async def body() -> RunBenchmarkOutput:
        try:
            return await run_benchmark(request, stop=lambda: flag[0], run_id=rid)
        except Exception as exc:
            log.warning("background benchmark %s failed: %s", rid, exc)
            raise

    task = asyncio.create_task(body())
    _RUNS[rid] = _Background(task, flag)
    store = ResultStore(results_dir(request.save_result))
    return RunBenchmarkOutput(run_id=rid, state="running",
                              result_path=str(store.run_dir(rid) / "result.json"),
                              warnings=["running in the background: poll benchmark_status, then read "
                                        "benchmark_results; cancel_benchmark stops it"])


def cancel(ref: RunRef) -> CancelOutput:
    run = _RUNS.get(ref.run_id)
    if run is None:
        status = benchmark_status(ref)
        return CancelOutput(run_id=ref.run_id, cancelled=False,
                            message=f"run is {status.state} and not running in this server process")
    if run.task.done():
        return CancelOutput(run_id=ref.run_id, cancelled=False, message="run already finished")
    run.stop[0] = True
    return CancelOutput(run_id=ref.run_id, cancelled=True,
                        message="stopping: requests in flight are aborted; finished ones are kept in the results")


async def _confirm_remote(request: RunBenchmarkInput, ctx: Context) -> RunBenchmarkInput:
    """Ask the user before load goes to an allowed but non-loopback target (check_target refuses otherwise)."""
    if request.confirm:
        return request
    spec = parse_simulate(request.simulate) if request.simulate is not None else None
    if spec is not None and not spec.sends_load:
        return request  # a simulated search from saved files sends nothing
    policy = TargetPolicy.from_env()
    base = policy.check(request.url)  # a target outside the allowlist is refused before anyone is asked
    if policy.is_loopback(base):
        return request
    if spec is not None:
        what = " and ".join(([f"a what_if calibration probe (about {PROBE_REQUESTS} requests, twice that if the host's "
                             "speed moves under the first)"] if spec.probe else [])
                            + ([f"one verify run of {request.search_prompts} requests at the predicted capacity"]
                               if spec.verify else []))
    elif request.search_capacity:
        what = "a capacity search (several load levels, rising until the SLO fails)"
    else:
        load = f"{request.rate:g} req/s" if request.rate else f"concurrency {request.concurrency or 1}"
        size = f"{request.num_prompts} requests" if request.num_prompts else \
            f"{request.duration_s:g} s" if request.duration_s else "the default run size"
        what = f"{load}, {size}"
    if await user_confirms(ctx, f"Send benchmark load to {base} ({what})? This loads a live server."):
        return request.model_copy(update={"confirm": True})
    return request


def with_plots(out: RunBenchmarkOutput) -> RunBenchmarkOutput | CallToolResult:
    """The result plus its PNG plots as image content, for clients that show images."""
    images: list[ContentBlock] = []
    for path in out.plots:
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        images.append(ImageContent(type="image", data=base64.b64encode(data).decode(), mime_type="image/png"))
    if not images:
        return out
    payload = out.model_dump(mode="json")
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(payload, indent=2)), *images],
                          structured_content=payload)


def register(mcp: MCPServer[Any]) -> None:
    async def _run(request: RunBenchmarkInput, ctx: Context) -> RunBenchmarkOutput | CallToolResult:
        request = await _confirm_remote(request, ctx)
        if request.background:
            return await start_background(request)

        async def report(progress: float, total: float | None, message: str) -> None:
            await ctx.report_progress(progress, total, message)

        return with_plots(await run_benchmark(request, report=report))

    add_model_tool(
        mcp, name="run_benchmark", title="Load-test a vLLM endpoint",
        description=(
            "Send load to a vLLM endpoint and measure it as `vllm bench serve` does: TTFT, TPOT, ITL, E2EL, "
            "throughput, goodput, plus the server's /metrics over the same window; search_capacity finds the highest "
            "load meeting slo. SENDS LOAD: allowed targets only; off loopback confirm=true after the user agreed."
        ),
        input_model=RunBenchmarkInput, output_model=RunBenchmarkOutput, run=_run, annotations=_SENDS_LOAD,
        advanced=("endpoint", "arrival", "burstiness", "ramp_start_rate", "ramp_end_rate", "trace",
                  "max_concurrency", "range_ratio", "dataset_kind", "prefix_len", "num_prefixes", "ignore_eos",
                  "warmup_requests", "percentiles", "search_variable", "search_max", "search_repeats",
                  "search_prompts", "seed", "serve_flags", "workers", "request_timeout_s", "scrape_metrics",
                  "label", "plot"),
        summarize=render_summary,
    )

    async def _status(request: RunRef, ctx: Context) -> RunStatus:
        return benchmark_status(request)

    add_model_tool(
        mcp, name="benchmark_status", title="Progress of a benchmark run",
        description="State (running, completed, cancelled, failed, lost) and request counts of a run_benchmark "
                    "run, by the run_id it returned.",
        input_model=RunRef, output_model=RunStatus, run=_status, annotations=_READS_RESULTS,
    )

    async def _results(request: ResultsRef, ctx: Context) -> BenchmarkResultsOutput:
        return load_results(request)

    add_model_tool(
        mcp, name="benchmark_results", title="Results of a finished benchmark run",
        description="The saved result JSON of a finished run_benchmark run (vllm bench serve fields plus "
                    "client_check, server and provenance blocks, or the capacity search), by run_id.",
        input_model=ResultsRef, output_model=BenchmarkResultsOutput, run=_results, annotations=_READS_RESULTS,
        summarize=render_saved,
    )

    async def _cancel(request: RunRef, ctx: Context) -> CancelOutput:
        return cancel(request)

    add_model_tool(
        mcp, name="cancel_benchmark", title="Stop a background benchmark run",
        description="Stop a background run_benchmark run promptly; requests already finished are kept and saved "
                    "as partial results (state 'cancelled').",
        input_model=RunRef, output_model=CancelOutput, run=_cancel, annotations=_CANCELS,
    )
