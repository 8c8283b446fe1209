"""Input and output models of diagnose_metrics (shared by the CLI, --json and the MCP schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vllm_tune.tools.net.vllm_probe import ServedModel

Severity = Literal["info", "warning", "critical"]
SloState = Literal["met", "violated", "unknown"]


class SloTargets(BaseModel):
    """Latency targets in milliseconds, judged at p90 (each one optional)."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: float | None = Field(default=None, gt=0, le=3_600_000, description="time to first token")
    itl_ms: float | None = Field(default=None, gt=0, le=600_000, description="inter-token latency")
    tpot_ms: float | None = Field(default=None, gt=0, le=600_000, description="time per output token (per request)")
    e2el_ms: float | None = Field(default=None, gt=0, le=86_400_000, description="end-to-end request latency")

    def given(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.itl_ms, self.tpot_ms, self.e2el_ms))


class ServeFlags(BaseModel):
    """Server settings the operator knows (metrics do not export them); the log's non-default args fill gaps."""

    model_config = ConfigDict(extra="forbid")

    max_num_seqs: int | None = Field(default=None, ge=1, le=1_000_000)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=100_000_000)
    max_model_len: int | None = Field(default=None, ge=1, le=100_000_000)
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=4096)
    max_cudagraph_capture_size: int | None = Field(default=None, ge=0, le=1_000_000)
    enforce_eager: bool | None = None


class Percentiles(BaseModel):
    """One latency distribution over the window, in milliseconds, with its bucket-resolution caveats."""

    count: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    p90_bucket_ms: tuple[float, float] | None = Field(default=None, description="histogram bucket holding p90")
    caveats: list[str] = Field(default_factory=list)


class Latency(BaseModel):
    ttft: Percentiles | None = None
    itl: Percentiles | None = None
    tpot: Percentiles | None = None
    e2el: Percentiles | None = None
    queue: Percentiles | None = None
    prefill: Percentiles | None = None
    decode: Percentiles | None = None
    inference: Percentiles | None = None
    promql_cross_check: dict[str, float] = Field(
        default_factory=dict, description="p90 in ms from PromQL histogram_quantile (Prometheus input only)")


class Workload(BaseModel):
    finished_requests: int | None = None
    request_rate_per_s: float | None = None
    prompt_tokens_mean: float | None = None
    prompt_tokens_p90: float | None = None
    output_tokens_mean: float | None = None
    output_tokens_p90: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    running_mean: float | None = None
    waiting_mean: float | None = None
    in_system_mean: float | None = Field(default=None, description="Little's law: request rate x mean E2E latency")
    concurrency_source: str | None = None
    finish_reasons: dict[str, float] = Field(default_factory=dict, description="share of finished requests")
    prefix_cache_hit_rate: float | None = None
    prefix_cache_hit_rate_lifetime: float | None = None
    spec_decode_acceptance_rate: float | None = None
    spec_decode_mean_acceptance_length: float | None = None
    parallel_sampling_n_mean: float | None = None


class EngineLoad(BaseModel):
    """One engine (or replica) as seen at the last scrape and over the window."""

    labels: dict[str, str]
    running_now: float | None = None
    waiting_now: float | None = None
    kv_usage_now: float | None = None
    finished_requests: float | None = None


class Capacity(BaseModel):
    kv_usage_now: float | None = None
    kv_usage_max: float | None = None
    kv_usage_mean: float | None = None
    preemptions: float | None = None
    preemptions_per_s: float | None = None
    preemptions_per_request: float | None = None
    queue_growth_per_s: float | None = None
    running_max: float | None = None
    waiting_max: float | None = None
    waiting_deferred_mean: float | None = None
    max_num_seqs: int | None = None
    max_num_seqs_source: str | None = None
    max_num_batched_tokens: int | None = None
    iteration_tokens_p50: float | None = None
    iteration_tokens_p90: float | None = None
    iteration_tokens_max_bucket: float | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    kv_cache_size_tokens: int | None = None
    kv_cache_max_concurrency: float | None = None
    prefix_caching_enabled: bool | None = None
    max_model_len: int | None = None
    engines: list[EngineLoad] = Field(default_factory=list)
    gauge_samples: int = 0


class SloResult(BaseModel):
    target_ms: float
    observed_p90_ms: float | None
    status: SloState
    share_within_target: float | None = Field(default=None, description="fraction of requests at or below target")
    note: str | None = None


class EvidenceItem(BaseModel):
    signal: str
    value: float
    threshold: float
    op: str
    holds: bool
    unit: str | None = None
    how: str | None = Field(default=None, description="where the value comes from")


class FindingAction(BaseModel):
    kind: str
    target: str
    direction: str
    value: str | None = None
    expected_effect: str
    risk: str
    knowledge_ids: list[str]


class Finding(BaseModel):
    id: str = Field(description="the knowledge entry id (triage.*); read it with get_knowledge_entry")
    title: str
    severity: Severity
    confidence: Literal["low", "medium", "high"]
    statement: str
    evidence: list[EvidenceItem]
    actions: list[FindingAction]
    sources: list[str]
    evidence_level: str
    note: str | None = None


class Abstention(BaseModel):
    id: str
    reason: str
    missing_signals: list[str] = Field(default_factory=list)


class NextStep(BaseModel):
    tool: str
    why: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ServerInfo(BaseModel):
    url: str | None = None
    version: str | None = None
    models: list[ServedModel] = Field(default_factory=list)
    model_names_in_metrics: list[str] = Field(default_factory=list)
    engines: int = 0
    multiprocess_api_servers: bool = False


class SignalValue(BaseModel):
    value: float
    how: str


class DiagnoseOutput(BaseModel):
    verdict: str = Field(description="one sentence: the bottleneck, 'healthy', or why the tool abstains")
    bottleneck: str | None = Field(default=None, description="id of the top finding at warning level or above")
    findings: list[Finding] = Field(default_factory=list)
    abstained: list[Abstention] = Field(default_factory=list)
    workload: Workload = Field(default_factory=Workload)
    latency: Latency = Field(default_factory=Latency)
    capacity: Capacity = Field(default_factory=Capacity)
    slo: dict[str, SloResult] = Field(default_factory=dict)
    slo_source: Literal["user", "default"] = "default"
    signals: dict[str, SignalValue] = Field(default_factory=dict)
    next_steps: list[NextStep] = Field(default_factory=list)
    caveats: list[str] = Field(default_factory=list)
    sources_used: list[str] = Field(default_factory=list)
    view: Literal["window", "lifetime", "log-only"] = "window"
    window_s: float | None = None
    window_start_unix: float | None = Field(default=None, description="start of the window (live or Prometheus)")
    window_end_unix: float | None = None
    server: ServerInfo = Field(default_factory=ServerInfo)
