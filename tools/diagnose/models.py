"""Input and output models of diagnose_metrics (shared by the CLI, --json and the MCP schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vllm_tune.tools.net.vllm_probe import ServedModel
from vllm_tune.tools.slo import SloCheck as SloCheck
from vllm_tune.tools.slo import SloTargets as SloTargets

Severity = Literal["info", "warning", "critical"]
PercentileKind = Literal["exact", "interpolated", "below_first_edge", "above_last_edge"]


class ServeFlags(BaseModel):
    """Server settings the operator knows (metrics do not export them); the log's non-default args fill gaps."""

    model_config = ConfigDict(extra="forbid")

    max_num_seqs: int | None = Field(default=None, ge=1, le=1_000_000, description="--max-num-seqs")
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=100_000_000,
                                               description="--max-num-batched-tokens")
    max_model_len: int | None = Field(default=None, ge=1, le=100_000_000, description="--max-model-len")
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=4096, description="--tensor-parallel-size")
    max_cudagraph_capture_size: int | None = Field(default=None, ge=0, le=1_000_000,
                                                   description="--max-cudagraph-capture-size")
    enforce_eager: bool | None = Field(default=None, description="--enforce-eager")


class Percentile(BaseModel):
    """One percentile of a bucketed distribution: a point value only where the buckets support one, else a bound.

    vLLM's histograms only say how many observations fell between two edges. Inside a bucket the value is
    interpolated (PromQL's histogram_quantile); in the first bucket only `< first edge` is known, and in the +Inf
    bucket only `> last edge`."""

    q: float = Field(description="percentile, 0-100")
    kind: PercentileKind
    value_ms: float | None = Field(description="point estimate; null when only a bound is known")
    lower_ms: float = Field(description="the value is above this bucket edge (0 for the first bucket)")
    upper_ms: float | None = Field(description="the value is at most this bucket edge; null above the last edge")
    text: str = Field(description="how to read it, e.g. '< 300 ms' or '45.1 ms (25-50 ms bucket)'")


class Percentiles(BaseModel):
    """One latency distribution over the window, in milliseconds; the mean comes from _sum/_count."""

    count: int
    mean_ms: float | None
    p50: Percentile | None = None
    p90: Percentile | None = None
    p95: Percentile | None = None
    p99: Percentile | None = None
    bucket_edges_ms: list[float] = Field(default_factory=list, description="the histogram's finite bucket edges")
    caveats: list[str] = Field(default_factory=list)

    def at(self, q: float) -> Percentile | None:
        found: Percentile | None = getattr(self, f"p{q:g}", None)
        return found


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


class EvidenceItem(BaseModel):
    signal: str
    value: float
    threshold: float
    op: str
    holds: bool | None = Field(description="null: undecided (the value is only known to lie in a range that "
                               "straddles the threshold)")
    lower: float | None = Field(default=None, description="the value is known to lie above this")
    upper: float | None = Field(default=None, description="and at most this (null: unbounded)")
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
    decided_by: list[str] = Field(default_factory=list, description="the targets and percentiles that decided it")


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
    bounded: bool = Field(default=False, description="the value is only known to lie in [lower, upper]")
    lower: float | None = None
    upper: float | None = None


class DiagnoseOutput(BaseModel):
    verdict: str = Field(description="one sentence: the bottleneck, 'healthy', or why the tool abstains")
    bottleneck: str | None = Field(default=None, description="id of the top finding at warning level or above")
    findings: list[Finding] = Field(default_factory=list)
    abstained: list[Abstention] = Field(default_factory=list)
    workload: Workload = Field(default_factory=Workload)
    latency: Latency = Field(default_factory=Latency)
    capacity: Capacity = Field(default_factory=Capacity)
    slo: dict[str, SloCheck] = Field(default_factory=dict, description="each target given, judged at "
                                     "slo_percentile from bucket bounds: met, violated or undecided")
    slo_source: Literal["user", "default"] = "default"
    slo_percentile: float = 90.0
    targets_used: dict[str, str] = Field(default_factory=dict, description="every latency target the rules "
                                         "used and where it came from (your SLO or a default)")
    warmup: str | None = Field(default=None, description="why the window looks like the server's warm-up")
    signals: dict[str, SignalValue] = Field(default_factory=dict)
    next_steps: list[NextStep] = Field(default_factory=list)
    caveats: list[str] = Field(default_factory=list)
    sources_used: list[str] = Field(default_factory=list)
    view: Literal["window", "lifetime", "log-only"] = "window"
    window_s: float | None = None
    window_start_unix: float | None = Field(default=None, description="start of the window (live or Prometheus)")
    window_end_unix: float | None = None
    server: ServerInfo = Field(default_factory=ServerInfo)
