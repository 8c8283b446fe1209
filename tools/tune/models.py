"""Inputs and state of a tuning session (one pydantic model each, shared by the CLI, JSON output and MCP)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from vllm_tune.tools.slo import GoodputSlo
from vllm_tune.tools.whatif.simulate import EstimateKind

Goal = Literal["latency", "throughput"]
TrialStatus = Literal["proposed", "measured", "failed", "rejected"]
SessionState = Literal["needs-measurement", "ready-for-next", "done"]
MAX_TRIALS = 50


class TuneWorkload(BaseModel):
    """The load every trial is measured with (the same for all, so trials compare like for like)."""

    endpoint: Literal["completions", "chat"] = Field(default="completions", description="OpenAI API used")
    input_len: int = Field(default=256, ge=1, le=1_000_000, description="prompt tokens")
    output_len: int = Field(default=128, ge=1, le=1_000_000, description="output tokens")
    concurrency: int | None = Field(default=None, ge=1, le=10_000, description="closed loop: requests in flight")
    rate: float | None = Field(default=None, gt=0, le=100_000, description="open loop: requests per second")
    num_prompts: int = Field(default=200, ge=10, le=100_000, description="measured requests per trial")
    warmup_requests: int = Field(default=4, ge=0, le=100, description="unmeasured requests first")
    seed: int = Field(default=0, description="prompts and arrivals seed")

    @model_validator(mode="after")
    def _one_load(self) -> TuneWorkload:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("the workload needs exactly one of concurrency or rate")
        return self


class TuneStartInput(BaseModel):
    command: str = Field(description="base `vllm serve ...` command; pin the flags to tune (--max-num-seqs 64); "
                                     "no --api-key (export VLLM_API_KEY)")
    goal: Goal = Field(default="latency", description="latency: lower the SLO percentile; throughput: raise goodput")
    slo: GoodputSlo = Field(default={}, description="targets in ms: ttft, tpot, e2el")
    slo_percentile: float = Field(default=99.0, gt=0, lt=100, description="percentile the SLO is judged at")
    workload: TuneWorkload = Field(description="load every trial is measured with")
    levers: list[str] = Field(default=[], description="flags the loop may change (default: by goal)")
    max_trials: int = Field(default=6, ge=1, le=MAX_TRIALS, description="measured trials, the baseline included")
    confirm_best: bool = Field(default=True, description="when a trial beat the baseline, end by measuring the "
                                                         "baseline again (one more run) to catch drift")
    env: dict[str, str] = Field(default={}, description="trial servers' env: VLLM_*, CUDA_*, NCCL_*, HF_*, OMP_*, "
                                                        "TORCH_* ... only; no secrets")
    vllm_version: str | None = Field(default=None, description="release the commands must be valid for")
    gpu: str | None = Field(default=None, description="GPU type, for lint checks")
    save_result: str | None = Field(default=None, description="results directory (sessions live in its tune/)")


class SessionRef(BaseModel):
    session_id: str = Field(description="id tune_start returned")
    save_result: str | None = Field(default=None, description="results directory of the session")


class RecordInput(BaseModel):
    session_id: str = Field(description="id tune_start returned")
    trial: int = Field(ge=0, description="trial number")
    run: str | None = Field(default=None, description="run id, run folder or result.json of the measured run")
    failed_reason: str | None = Field(default=None, max_length=2000,
                                      description="instead of a run: why the trial could not be measured")
    save_result: str | None = Field(default=None, description="results directory of the session")

    @model_validator(mode="after")
    def _one(self) -> RecordInput:
        if (self.run is None) == (self.failed_reason is None):
            raise ValueError("give either run or failed_reason")
        return self


class RunTrialInput(BaseModel):
    session_id: str = Field(description="id tune_start returned")
    trial: int | None = Field(default=None, ge=0, description="default: the trial waiting for measurement")
    confirm: bool = Field(default=False, description="must be true: starts vLLM on this machine and loads it")
    start_timeout_s: float = Field(default=900.0, gt=0, le=3600, description="seconds vLLM may take to start")
    save_result: str | None = Field(default=None, description="results directory of the session")


class TrialPrediction(BaseModel):
    """What what_if predicted for a trial before it was measured, and, once it is, how far off that was."""

    objective: float = Field(description="predicted session objective: the measured value of the trial it derives "
                                         "from, times the simulated change")
    gain: float = Field(description="predicted relative change of the objective (positive: better)")
    uncertainty: float | None = Field(description="the calibration's largest residual on its own runs (relative); "
                                                  "None: no residuals")
    calibration_runs: list[str] = Field(default_factory=list, description="the session's runs it was calibrated on")
    kind: EstimateKind = Field(default="estimate",
                               description="'estimate', or 'best case' / 'worst case' / 'no bound' when the "
                                           "session's runs could not tell a cost the change needs")
    measured: float | None = None
    error: float | None = Field(default=None, description="(predicted - measured) / measured, once measured")


class Trial(BaseModel):
    id: int
    command: str
    changes: dict[str, str] = Field(description="flag -> value against the trial it was derived from")
    derived_from: int | None = None
    rationale: str
    knowledge_ids: list[str] = Field(default_factory=list)
    lint: str = Field(default="", description="lint_config verdict for the command")
    status: TrialStatus = "proposed"
    run_id: str | None = None
    result_path: str | None = None
    objective: float | None = None
    slo_met: bool | None = None
    verdict: str | None = Field(default=None, description="against the best trial at the time: better, worse, "
                                                          "within-noise, not-comparable (the baseline: baseline; "
                                                          "the confirmation: confirmed, not-confirmed)")
    confirms: int | None = Field(default=None, description="set on the confirmation run: the trial (the baseline) "
                                                           "it measures again")
    prediction: TrialPrediction | None = Field(default=None, description="what_if's prediction, made when proposed")
    notes: list[str] = Field(default_factory=list)


class TrialServer(BaseModel):
    """A vLLM server a trial started on this machine, recorded from the moment its process exists until it is
    stopped, so that a later command finds it if the vllm-tune process that started it died."""

    trial: int
    pgid: int = Field(description="process group of the server (its leader's pid)")
    leader_start_ticks: int | None = Field(description="the leader's start time, clock ticks since boot")
    boot_id: str | None
    tag: str = Field(description="marker in the environment of every process of the server")
    port: int
    log_path: str
    started_utc: str
    owner_pid: int = Field(description="the vllm-tune process that started it")
    owner_start_ticks: int | None
    leftover: bool = Field(default=False, description="true when the process that started it has ended (shown by "
                                                      "tune_report; any other tune step stops such a server)")


class TuneState(BaseModel):
    session_id: str
    path: str
    goal: Goal
    objective: str = Field(description="result field the loop optimises, e.g. p99_ttft_ms")
    better_when: Literal["lower", "higher"]
    slo: dict[str, float]
    slo_percentile: float
    workload: TuneWorkload
    levers: list[str]
    max_trials: int
    confirm_best: bool = True
    env: dict[str, str]
    vllm_version: str | None
    gpu: str | None
    save_result: str | None
    trials: list[Trial] = Field(default_factory=list)
    best: int | None = Field(default=None, description="id of the best measured trial")
    state: SessionState = "needs-measurement"
    next_step: str = ""
    knowledge_ids: list[str] = Field(default_factory=list)
    confirmation: str | None = Field(default=None, description="whether the best trial's gain held against the "
                                                               "baseline measured again at the end")
    server: TrialServer | None = Field(default=None, description="the trial server running on this machine, "
                                                                 "if any (pid, port, since when, started by)")

    def trial(self, trial_id: int) -> Trial:
        for t in self.trials:
            if t.id == trial_id:
                return t
        raise KeyError(trial_id)
