"""Triage playbooks as MCP prompts: the order of calls an experienced operator would make."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server import MCPServer
from pydantic import Field


def register(mcp: MCPServer[Any]) -> None:
    @mcp.prompt(name="why_is_ttft_high", title="Why is TTFT high?",
                description="Playbook: split TTFT into queueing and prefill on a live server, with evidence.")
    def why_ttft_high(target: Annotated[str, Field(description="vLLM server URL")] = "http://127.0.0.1:8000",
                      ttft_slo_ms: Annotated[str, Field(description="TTFT target in ms, if any")] = "") -> str:
        slo = f" with a TTFT SLO of {ttft_slo_ms} ms" if ttft_slo_ms else ""
        return (
            f"Find out why time to first token is high on the vLLM server at {target}{slo}.\n"
            "1. Call diagnose_metrics on that URL (window 30-60 s while real traffic flows; pass the SLO). "
            "Read `workload` first: request rate, prompt lengths and concurrency decide what is normal.\n"
            "2. Split TTFT into queueing and prefill: a growing waiting queue points at capacity "
            "(kb://entries/triage.ttft-high-queue-growing); an empty queue at prefill itself "
            "(kb://entries/triage.ttft-high-queue-empty); preemptions at KV pressure "
            "(kb://entries/triage.preemption-kv-thrash).\n"
            "3. For each finding, quote its evidence values and cite its knowledge ids; say when a finding "
            "rests on an attributed claim rather than verified source.\n"
            "4. Propose at most two changes, and verify them with run_benchmark against the same workload "
            "before and after (compare the runs)."
        )

    @mcp.prompt(name="why_is_throughput_low", title="Why is throughput low?",
                description="Playbook: find what limits throughput (batching, KV, prefill, parallel layout).")
    def why_throughput_low(target: Annotated[str, Field(description="vLLM server URL")] = "http://127.0.0.1:8000",
                           ) -> str:
        return (
            f"Find out why the vLLM server at {target} delivers less throughput than expected.\n"
            "1. diagnose_metrics under load: compare running requests with --max-num-seqs, the KV-cache "
            "usage, the preemption rate and the tokens per engine step against --max-num-batched-tokens.\n"
            "2. If the server is not saturated, the client or the traffic is the limit: measure with "
            "run_benchmark at increasing concurrency and find the knee.\n"
            "3. If KV-bound (usage near 1, preemptions), look at KV dtype, max model length and the "
            "parallel layout (recommend_parallelism); if MoE, check kernel configs with tune_moe.\n"
            "4. Cite the knowledge ids behind every recommendation (search_knowledge)."
        )

    @mcp.prompt(name="tune_new_deployment", title="Tune a new deployment",
                description="Playbook: plan the layout, lint the command, benchmark, then tune one lever at a time.")
    def tune_new_deployment(model: Annotated[str, Field(description="model id or path")] = "",
                            gpu: Annotated[str, Field(description="GPU type, e.g. H100")] = "H100",
                            gpus: Annotated[str, Field(description="number of GPUs")] = "8",
                            goal: Annotated[str, Field(description="latency, throughput or balanced")] = "balanced",
                            ) -> str:
        return (
            f"Plan and tune a new vLLM deployment of {model or '<model>'} on {gpus}x {gpu} for goal '{goal}'.\n"
            "1. Characterize the workload: prompt and output length distributions, request rate or "
            "concurrency, and the SLO (TTFT, TPOT/ITL, E2E percentiles).\n"
            "2. recommend_parallelism with those inputs; explain the top candidate and the rules it cites.\n"
            "3. For MoE models, tune_moe in check mode for the chosen layout; tune or plan if configs are "
            "missing.\n"
            "4. Start the server with the recommended command, then run_benchmark with an SLO capacity "
            "search; compare measured against estimated numbers and say where the estimate was off.\n"
            "5. diagnose_metrics during the benchmark window to explain the bottleneck at the knee."
        )
