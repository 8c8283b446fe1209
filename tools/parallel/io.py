"""Input and output models of recommend_parallelism (shared by the CLI, --json and the MCP schema)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vllm_tune.tools.models.facts import GpuSpec, ModelFacts

Goal = Literal["latency", "throughput", "balanced"]
LaunchKind = Literal["single-node", "multi-node-dp", "multi-node-mp", "multi-node-ray", "multi-node-manual"]


class PlanInput(BaseModel):
    """What to serve, on what, for which workload."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="local model dir or config.json, catalog name (e.g. deepseek-r1), or HF id")
    revision: str | None = Field(default=None, description="hub revision (branch, tag, commit) for HF ids")
    offline: bool = Field(default=False, description="never contact the hub; use the catalog and the disk cache")
    gpu: str = Field(description="GPU type: short name (H100, H200, B200, MI300X, ...) or full device name")
    gpus: int = Field(ge=1, le=4096, description="GPUs available in total")
    gpus_per_node: int | None = Field(default=None, ge=1, le=144, description="default: the GPU's usual node size")
    interconnect: Literal["nvlink", "pcie"] | None = Field(
        default=None, description="GPU-to-GPU link inside a node; default from the GPU catalog")
    gpu_memory_gib: float | None = Field(default=None, gt=0, le=10_000,
                                         description="override the GPU memory (custom hardware)")
    gpu_bandwidth_tbs: float | None = Field(default=None, gt=0, le=1_000, description="override HBM bandwidth")
    goal: Goal = Field(default="balanced", description="latency | throughput | balanced")
    isl: int = Field(default=1024, ge=1, le=10_000_000, description="input (prompt) tokens per request")
    osl: int = Field(default=256, ge=1, le=1_000_000, description="output tokens per request")
    concurrency: int | None = Field(default=None, ge=1, le=1_000_000, description="requests in flight")
    rate: float | None = Field(default=None, gt=0, le=1_000_000, description="request arrival rate, requests/s")
    slo_ttft_ms: float | None = Field(default=None, gt=0, description="time-to-first-token SLO (ms)")
    slo_tpot_ms: float | None = Field(default=None, gt=0, description="time-per-output-token SLO (ms)")
    quantization: str | None = Field(default=None, description="serve weights as fp8/nvfp4/mxfp4/awq/... "
                                     "(default: the checkpoint's own format)")
    kv_cache_dtype: str = Field(default="auto", description="auto | fp8 | fp8_e4m3 | fp8_e5m2 | bfloat16")
    max_model_len: int | None = Field(default=None, ge=16, le=100_000_000,
                                      description="context length to plan for (default: fits the workload)")
    gpu_memory_utilization: float = Field(default=0.9, gt=0.1, le=0.99, description="as vllm serve takes it")
    vllm_version: str = Field(default="0.34.0", description="vLLM version the command must be valid for")
    head_address: str | None = Field(
        default=None, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9.:_-]*$",
        description="address (IP or host name) of the head node for multi-node commands; default: a placeholder")
    top: int = Field(default=5, ge=1, le=50, description="how many candidates to return")
    estimator: Literal["builtin", "aic", "both"] = Field(
        default="builtin", description="builtin = our fitted step-time model; aic = NVIDIA AIConfigurator's "
                                       "(needs the `aic` extra; NVIDIA GPUs and models it knows); both = side by side")
    verify_url: str | None = Field(
        default=None, description="base URL of a vLLM server already started with the top candidate's command: "
                                  "run a short benchmark at the plan's workload and report estimate vs measured")
    verify_prompts: int = Field(default=40, ge=4, le=2000, description="measured requests of the verify run")
    verify_save_result: str | None = Field(default=None, description="results directory for the verify run "
                                                                     "(default ./vllm-tune-results)")
    verify_confirm: bool = Field(default=False, description="must be true to send the verify load to a "
                                                            "non-loopback server")

    @model_validator(mode="after")
    def _one_load(self) -> PlanInput:
        if self.concurrency is not None and self.rate is not None:
            raise ValueError("give either concurrency or rate, not both")
        return self


class Cited(BaseModel):
    """A reason or a rejection backed by a knowledge-base entry."""

    id: str = Field(description="knowledge-base entry id (vllm-tune kb show ID)")
    why: str
    attributed: bool = Field(default=False, description="True when the entry is an unverified third-party claim")


class MemoryBreakdown(BaseModel):
    """Per-GPU memory of the most loaded GPU in a replica, GiB."""

    usable_gib: float = Field(description="GPU memory x gpu_memory_utilization")
    weights_gib: float
    activation_gib: float = Field(description="peak activations of the profiling run (estimate)")
    overhead_gib: float = Field(description="CUDA graphs, NCCL buffers, allocator slack (estimate)")
    kv_cache_gib: float = Field(description="what is left for the KV cache")
    kv_bytes_per_token: float = Field(description="KV bytes one token takes on this GPU")
    kv_tokens_per_replica: int
    max_concurrency_at_max_len: float = Field(description="vLLM's 'Maximum concurrency for N tokens' analogue")
    max_concurrency_at_workload: float = Field(
        description="requests that fit in KV at once at the mean live context isl + osl/2 (vLLM allocates blocks "
                    "on demand, so a running request holds its prompt plus the tokens generated so far)")


class Estimate(BaseModel):
    """Step-time estimate fitted to published measurements; never a measurement. Verify with run_benchmark."""

    label: Literal["estimate"] = "estimate"
    concurrency_per_replica: float
    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s: float = Field(description="all replicas together")
    output_tokens_per_s_per_gpu: float
    meets_slo: bool | None = Field(description="None when no SLO was given")
    goodput_requests_per_s: float | None = Field(description="requests/s that meet the SLO (0 if the SLO is missed)")
    uncertainty: str = Field(description="the fitted model's residuals on published measurements")
    bottleneck: str
    calibration: str | None = Field(default=None, description="hardware calibration used (vllm-tune calibrate)")


class PeerEstimate(BaseModel):
    """Another estimator's figures for the same layout and load (e.g. NVIDIA AIConfigurator)."""

    estimator: str = Field(description="name and version")
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    output_tokens_per_s: float | None = None
    output_tokens_per_s_per_gpu: float | None = None
    note: str | None = Field(default=None, description="why there is no figure, or what was assumed")


class MetricCheck(BaseModel):
    metric: str
    estimate: float | None
    measured: float | None
    ratio: float | None = Field(description="estimate / measured")


class Verification(BaseModel):
    """Estimate vs measurement on the live server (plan --verify)."""

    url: str
    layout: str
    concurrency: int
    num_prompts: int
    result_path: str | None
    metrics: list[MetricCheck]
    warnings: list[str] = Field(default_factory=list)


class Layout(BaseModel):
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool
    expert_parallel_size: int = Field(description="TP x DP when EP is on, else 1")
    replicas: int = Field(default=1, description="independent `vllm serve` copies of this layout (MoE models that "
                                                 "fit one copy; dense models use DP instead)")
    gpus_used: int = Field(description="TP x PP x DP x replicas")

    def label(self) -> str:
        text = f"TP{self.tensor_parallel_size}"
        if self.pipeline_parallel_size > 1:
            text += f" PP{self.pipeline_parallel_size}"
        if self.data_parallel_size > 1:
            text += f" DP{self.data_parallel_size}"
        if self.enable_expert_parallel:
            text += f" EP{self.expert_parallel_size}"
        if self.replicas > 1:
            text += f" x{self.replicas} replicas"
        return text


class NodeCommand(BaseModel):
    """What to run on one node of a multi-node layout."""

    node: int = Field(description="node index, 0 = head")
    role: Literal["head", "worker"]
    gpus: int = Field(description="GPUs this node contributes")
    prepare: list[str] = Field(default_factory=list, description="commands to run first (e.g. joining a Ray cluster)")
    command: str = Field(description="the command to start on this node")
    env: dict[str, str] = Field(default_factory=dict, description="environment the command needs on this node")
    data_parallel_ranks: list[int] = Field(default_factory=list,
                                           description="DP ranks this node runs (empty when vLLM assigns them)")


class Candidate(Layout):
    rank: int
    score: float = Field(description="ranking score for the goal (higher is better); comparable within one plan")
    command: str = Field(description="the vllm serve command line (the head node's when the layout spans nodes)")
    env: dict[str, str] = Field(default_factory=dict, description="environment the head node's command needs")
    launch: LaunchKind = Field(
        default="single-node", description="how the layout is started; multi-node-manual = no per-node commands")
    node_commands: list[NodeCommand] = Field(
        default_factory=list, description="per-node commands when one copy spans nodes (empty on one node)")
    memory: MemoryBreakdown
    estimate: Estimate | None
    peer_estimate: PeerEstimate | None = Field(default=None, description="AIConfigurator's figures (--estimator)")
    reasons: list[Cited]
    warnings: list[Cited] = Field(default_factory=list)


class Rejected(Layout):
    rule: str = Field(description="knowledge-base id of the rule the layout breaks")
    why: str


class PlanOutput(BaseModel):
    feasible: bool
    summary: str
    model: ModelFacts
    hardware: GpuSpec
    gpus: int
    gpus_per_node: int
    nodes: int
    workload: dict[str, float | int | str | None]
    assumptions: list[str]
    candidates: list[Candidate]
    rejected: list[Rejected]
    rejected_total: int = Field(description="rejected layouts before truncation")
    what_would_fit: list[str] = Field(default_factory=list, description="when nothing fits: what would")
    warnings: list[str] = Field(default_factory=list)
    ranking_why: str | None = Field(default=None, description="one line: why the first layout beats the next "
                                                              "kind of layout, with the figures")
    verification: Verification | None = None
