"""Input and output models of compare_runs, shared by the CLI, `--json` and the MCP schema."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vllm_tune.tools.compare.stats import MAX_RESAMPLES, MIN_RESAMPLES

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
RATE_METRICS = ("request_throughput", "output_throughput", "request_goodput", "total_token_throughput")
DEFAULT_METRICS = ("ttft", "tpot", "itl", "e2el", "request_throughput", "output_throughput", "request_goodput")
MAX_RUNS = 12

Severity = Literal["blocking", "caution", "info"]
Overall = Literal["better", "worse", "mixed", "within-noise", "not-comparable"]


class CompareInput(BaseModel):
    """Which saved benchmark runs to compare, against which baseline, and how strictly."""

    model_config = ConfigDict(extra="forbid")

    runs: list[str] = Field(min_length=2, max_length=MAX_RUNS,
                            description="2+ runs: run ids, run folders or result JSON paths (ours or vllm bench serve)")
    baseline: int = Field(default=0, ge=0, description="index in `runs` of the baseline; the others are candidates")
    percentiles: list[float] | None = Field(
        default=None, description="percentiles to compare, e.g. [50, 99]; default: every pNN present in both runs")
    metrics: list[str] | None = Field(
        default=None, description="metrics to compare (default: latencies, throughputs and goodput)")
    seed: int = Field(default=0, description="seed of the bootstrap resampling (same seed, same intervals)")
    confidence: float = Field(default=0.95, ge=0.5, le=0.999, description="confidence level of the intervals")
    resamples: int = Field(default=MAX_RESAMPLES, ge=MIN_RESAMPLES, le=MAX_RESAMPLES,
                           description="bootstrap resamples per metric (fewer are used for very large runs)")
    noise_threshold_pct: float = Field(
        default=5.0, gt=0, le=100,
        description="without per-request data: relative change below this is called within-noise (a weaker verdict)")
    min_effect_pct: float = Field(
        default=2.0, ge=0, le=100,
        description="with per-request data: a significant change smaller than this is still called within-noise")
    results_dir: str | None = Field(default=None, description="where run ids are looked up "
                                                              "(default $VLLM_TUNE_RESULTS_DIR or ./vllm-tune-results)")

    @model_validator(mode="after")
    def _consistent(self) -> CompareInput:
        if self.baseline >= len(self.runs):
            raise ValueError(f"baseline index {self.baseline} is out of range for {len(self.runs)} runs")
        if self.percentiles is not None and any(not 0 < p < 100 for p in self.percentiles):
            raise ValueError("percentiles must lie strictly between 0 and 100")
        if self.metrics is not None:
            known = set(LATENCY_METRICS) | set(RATE_METRICS)
            unknown = [m for m in self.metrics if m not in known]
            if unknown:
                raise ValueError(f"unknown metric {unknown[0]!r}; expected some of {', '.join(sorted(known))}")
        return self


class RunInfo(BaseModel):
    index: int
    ref: str
    path: str
    format: Literal["vllm-tune-benchmark", "vllm-tune-capacity", "vllm-bench-serve"]
    detailed: bool = Field(description="vllm bench serve --save-detailed per-request arrays present")
    run_id: str | None = None
    label: str | None = None
    date: str | None = None
    model: str | None = None
    server_version: str | None = None
    completed: int | None = None
    failed: int | None = None
    per_request: list[str] = Field(description="per-request series usable for bootstrap intervals (ttft, e2el, tpot)")
    notes: list[str] = Field(default_factory=list)


class Check(BaseModel):
    """One comparability finding: blocking ones make every verdict not-comparable."""

    id: str = Field(description="what was checked, e.g. workload.output_len, load.rate, client.limited")
    severity: Severity
    message: str
    baseline: Any = None
    candidate: Any = None
    knowledge_ids: list[str] = Field(default_factory=list)


class MetricComparison(BaseModel):
    metric: str = Field(description="e.g. ttft, e2el, request_throughput, capacity")
    statistic: str = Field(description="mean, median, pNN, or value")
    key: str = Field(description="the field compared in the result files, e.g. p99_ttft_ms")
    unit: str
    better_when: Literal["lower", "higher"]
    baseline: float | None
    candidate: float | None
    delta: float | None
    delta_pct: float | None
    ci_low: float | None = Field(default=None, description="interval of the delta (candidate - baseline)")
    ci_high: float | None = None
    basis: Literal["bootstrap", "threshold", "none"] = Field(
        description="bootstrap: per-request interval; threshold: relative-noise rule only (weaker); none: no verdict")
    verdict: Literal["better", "worse", "within-noise", "not-comparable"]
    note: str | None = None


class ServerDiff(BaseModel):
    field: str
    baseline: float | None
    candidate: float | None
    delta: float | None


class ServerExplanation(BaseModel):
    hint: str
    knowledge_ids: list[str]


class CandidateComparison(BaseModel):
    candidate: int
    baseline: int
    overall: Overall
    summary: str
    checks: list[Check] = Field(default_factory=list)
    metrics: list[MetricComparison] = Field(default_factory=list)
    server: list[ServerDiff] = Field(default_factory=list, description="what /metrics said in each window")
    likely_why: list[ServerExplanation] = Field(default_factory=list)
    resamples: int | None = Field(default=None, description="bootstrap resamples used (None: no per-request data)")
    knowledge_ids: list[str] = Field(default_factory=list)


class CompareOutput(BaseModel):
    baseline: int
    runs: list[RunInfo]
    comparisons: list[CandidateComparison]
    confidence: float = Field(description="confidence level of every interval")
    method: str = Field(description="how verdicts were reached, and their limits")
    knowledge_ids: list[str] = Field(default_factory=list)
