"""run_benchmark: load tests, SLO goodput and capacity search against a live vLLM endpoint.

One input model and one output model shared by the CLI, `--json` and the MCP schema. The result
block carries the field names and units of `vllm bench serve --save-result` (vllm-facts.md §5.4)
plus our own blocks: `client_check` (did the client keep its schedule), `server` (what /metrics
said over the same window) and `provenance`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from vllm_tune.tools.bench import arrivals, workloads
from vllm_tune.tools.bench.capacity import CapacityResult, SearchVariable, search_capacity
from vllm_tune.tools.bench.client import auth_headers, build_body
from vllm_tune.tools.bench.metrics import compute_metrics, slo_checks
from vllm_tune.tools.bench.provenance import collect, utc_now
from vllm_tune.tools.bench.records import RecordLog
from vllm_tune.tools.bench.runner import CANCELLED as CANCELLED_ERROR
from vllm_tune.tools.bench.runner import LoadPlan, Progress, check_schedule, choose_workers, run_load, warm_up
from vllm_tune.tools.bench.server_watch import ServerWatch, attach_diagnosis, save_window
from vllm_tune.tools.bench.simulated import SimulatedSearch
from vllm_tune.tools.bench.store import ResultStore, RunStatus, StatusWriter, new_run_id, results_dir
from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.files import regular_file
from vllm_tune.tools.net.connect import async_guarded_client
from vllm_tune.tools.net.http import SecretRedactor, api_key
from vllm_tune.tools.net.targets import TargetPolicy
from vllm_tune.tools.slo import GoodputSlo, check_search_slo
from vllm_tune.tools.surface import say

MAX_REQUESTS = 10_000
MAX_DURATION_S = 1_800.0
MAX_CONCURRENCY = 1_024
DEFAULT_PROMPTS = 200
# The control plane (/v1/models, /version, /tokenize, /detokenize, /metrics during the run): every answer
# is small; a server that streams more, or takes longer, is refused instead of filling memory or hanging.
CONTROL_MAX_BYTES = 16 * 1024 * 1024
CONTROL_DEADLINE_S = 60.0

ProgressCallback = Callable[[float, float | None, str], Awaitable[None]]


class RunBenchmarkInput(BaseModel):
    """What load to send where, and what to measure."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="vLLM server base URL, e.g. http://127.0.0.1:8000 (must be allowed by the "
                                 "target policy: loopback, or listed in VLLM_TUNE_ALLOWED_TARGETS)")
    model: str | None = Field(default=None, description="served model id; default: the first from /v1/models")
    endpoint: Literal["completions", "chat"] = Field(default="completions", description="OpenAI API used")
    concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY,
                                    description="closed loop: keep this many requests in flight")
    rate: float | None = Field(default=None, gt=0, le=100_000, description="open loop: requests per second")
    arrival: Literal["poisson", "constant", "gamma"] = Field(
        default="poisson", description="inter-arrival distribution for `rate`; gamma uses `burstiness`")
    burstiness: float = Field(default=1.0, gt=0, le=100,
                              description="gamma shape: 1 = Poisson, <1 burstier, >1 smoother (as vllm bench serve)")
    ramp_start_rate: float | None = Field(default=None, ge=0, description="linear ramp from this rate (req/s)")
    ramp_end_rate: float | None = Field(default=None, ge=0, description="... to this rate over duration_s")
    trace: str | None = Field(default=None, description="JSONL trace to replay: timestamp (ms) or offset_s per line, "
                                                         "optional input_length/output_length")
    max_concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY,
                                        description="cap on requests in flight for rate/ramp/trace runs")
    num_prompts: int | None = Field(default=None, ge=1, le=MAX_REQUESTS,
                                    description=f"measured requests (default {DEFAULT_PROMPTS}, cap {MAX_REQUESTS})")
    duration_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S,
                                     description="stop sending after this many seconds (cap 1800)")
    input_len: int = Field(default=256, ge=1, le=1_000_000, description="prompt tokens (random datasets), exact")
    output_len: int = Field(default=128, ge=1, le=1_000_000, description="output tokens per request")
    range_ratio: float = Field(default=0.0, ge=0, lt=1,
                               description="random lengths uniform in [len*(1-r), len*(1+r)] (vllm bench serve's)")
    dataset: str | None = Field(default=None, description="ShareGPT JSON or custom JSONL file on the client host")
    dataset_kind: Literal["random", "shared-prefix", "sharegpt", "jsonl"] | None = Field(
        default=None, description="workload kind (default: from dataset/prefix_len)")
    prefix_len: int = Field(default=0, ge=0, description="shared-prefix tokens (shared-prefix workload)")
    num_prefixes: int = Field(default=1, ge=1, le=10_000, description="distinct shared prefixes")
    ignore_eos: bool = Field(default=True, description="generate exactly output_len tokens")
    warmup_requests: int = Field(default=2, ge=0, le=100, description="unmeasured requests sent first")
    # Plain mutable defaults (pydantic copies them): the MCP registry cannot flatten default_factory fields.
    slo: GoodputSlo = Field(default={},
                            description="SLO in milliseconds, keys ttft, tpot, e2el (goodput and capacity)")
    slo_percentile: float = Field(default=99.0, gt=0, lt=100, description="percentile the capacity search checks")
    percentiles: list[float] = Field(default=[50.0, 90.0, 95.0, 99.0], description="percentiles reported")
    search_capacity: bool = Field(default=False, description="find the highest load meeting the SLO")
    search_variable: SearchVariable = Field(default="rate", description="what the search raises")
    search_max: float | None = Field(default=None, gt=0, description="upper bound for the capacity search")
    search_repeats: int = Field(default=2, ge=1, le=5, description="runs at the boundary points")
    search_prompts: int = Field(default=100, ge=10, le=MAX_REQUESTS, description="requests per search step")
    simulate: str | None = Field(default=None, description="predict the search with what_if, sending none of it: "
                                                           "'cal.json', 'run1,run2' or 'probe'; ',verify' adds one "
                                                           "real run")
    seed: int = Field(default=0, description="prompts and arrivals seed")
    save_result: str | None = Field(default=None, description="results directory (default ./vllm-tune-results)")
    background: bool = Field(default=False, description="MCP: return a run id at once; poll benchmark_status")
    confirm: bool = Field(default=False, description="must be true to send load to a non-loopback target")
    serve_flags: dict[str, str] = Field(default={}, description="server flags to record in provenance")
    workers: int | None = Field(default=None, ge=1, le=64, description="load processes (default: automatic)")
    request_timeout_s: float = Field(default=600.0, gt=0, le=3600, description="per-request limit")
    scrape_metrics: bool = Field(default=True, description="scrape /metrics every second during the run")
    label: str | None = Field(default=None, description="stored with the result")
    plot: bool = Field(default=False, description="write PNG plots (needs matplotlib, the `plot` extra)")

    @model_validator(mode="after")
    def _consistent(self) -> RunBenchmarkInput:
        modes = sum(x is not None for x in (self.concurrency, self.rate, self.trace)) + \
            (self.ramp_start_rate is not None or self.ramp_end_rate is not None)
        if modes > 1:
            raise ValueError("choose one load shape: concurrency, rate, ramp (ramp_start_rate/ramp_end_rate) or trace")
        if modes == 0 and not self.search_capacity:
            raise ValueError("give concurrency or rate (or a ramp, a trace, or search_capacity)")
        if (self.ramp_start_rate is None) != (self.ramp_end_rate is None):
            raise ValueError("a ramp needs both ramp_start_rate and ramp_end_rate")
        if self.ramp_start_rate is not None and self.duration_s is None:
            raise ValueError("a ramp needs duration_s")
        check_search_slo(self.slo, self.search_capacity)
        if self.simulate is not None and not self.search_capacity:
            raise ValueError("simulate predicts a capacity search: it needs search_capacity")
        if any(not 0 < p < 100 for p in self.percentiles):
            raise ValueError("percentiles must lie strictly between 0 and 100")
        if self.prefix_len and self.prefix_len >= self.input_len:
            raise ValueError("prefix_len must be smaller than input_len")
        return self


def spread_lengths(n: int, input_len: int, output_len: int, ratio: float, seed: int,
                   ) -> list[tuple[int | None, int | None]]:
    """Per-request (input, output) lengths drawn uniformly from [len*(1-r), len*(1+r)], at least 1 token, the
    way vllm bench serve's random dataset spreads them (--random-range-ratio)."""
    rng = random.Random(seed ^ 0x5EED)

    def one(length: int) -> int:
        return rng.randint(max(1, math.floor(length * (1 - ratio))), max(1, math.ceil(length * (1 + ratio))))

    return [(one(input_len), one(output_len)) for _ in range(n)]


class BenchResult(BaseModel):
    """Flat, `vllm bench serve --save-result` compatible; mean_/median_/std_/pNN_<metric>_ms keys are extra fields."""

    model_config = ConfigDict(extra="allow")

    date: str
    backend: str
    endpoint_type: str
    label: str | None = None
    model_id: str
    tokenizer_id: str
    num_prompts: int
    request_rate: float | str
    burstiness: float
    max_concurrency: int | None
    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    request_goodput: float | None
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int


class RunBenchmarkOutput(BaseModel):
    run_id: str
    state: str = Field(description="completed, cancelled, running (background) or failed")
    result_path: str | None = None
    result: BenchResult | None = None
    capacity: CapacityResult | None = None
    simulation: SimulatedSearch | None = Field(default=None, description="simulate: calibration, uncertainty, verify")
    warnings: list[str] = Field(default_factory=list)
    plots: list[str] = Field(default_factory=list)


class RunRef(BaseModel):
    run_id: str = Field(description="id run_benchmark returned")
    save_result: str | None = Field(default=None, description="results directory the run was saved under")


class CancelOutput(BaseModel):
    run_id: str
    cancelled: bool
    message: str


def check_target(req: RunBenchmarkInput, policy: TargetPolicy | None = None) -> str:
    """Allowed by policy, explicitly confirmed when the target is not loopback, and file arguments that can be
    read (so a bad path is refused before any load is sent)."""
    if req.trace:
        regular_file(req.trace, "trace")
    if req.dataset:
        regular_file(req.dataset, "dataset")
    pol = policy or TargetPolicy.from_env()
    base = pol.check(req.url)
    if not pol.is_loopback(base) and not req.confirm:
        raise BadInputError(f"{base} is not a loopback address: sending benchmark load to it needs explicit "
                            + say(mcp="confirmation (confirm=true, only after the user agreed)",
                                  cli="confirmation (--yes)"))
    return base


class _Session:
    """Everything one run_benchmark call shares between its measured runs."""

    def __init__(self, req: RunBenchmarkInput, base: str, key: str | None, ctl: httpx.AsyncClient,
                 policy: TargetPolicy | None = None) -> None:
        self.req, self.base, self.key, self.ctl = req, base, key, ctl
        self.policy = policy
        # Where the measured window's first and last /metrics scrapes are saved (a plain run's folder).
        self.scrape_dir: Path | None = None
        self.model = req.model or ""
        self.version: str | None = None
        self.max_model_len: int | None = None
        self.tok: workloads.ServerTokenizer | None = None
        self.redact = SecretRedactor([key] if key else None)

    async def probe(self) -> None:
        try:
            models = await self.ctl.get("/v1/models")
        except httpx.HTTPError as exc:
            raise TargetError(self.redact(f"cannot reach {self.base}: {type(exc).__name__}: {exc}")) from None
        if models.status_code in (401, 403):
            raise TargetError(f"{self.base} refused the request (HTTP {models.status_code}); set VLLM_API_KEY")
        if models.status_code != 200:
            raise TargetError(f"{self.base}/v1/models answered HTTP {models.status_code}; is this a vLLM server?")
        try:
            data = [m for m in models.json().get("data", []) if isinstance(m, dict) and "id" in m]
        except (ValueError, AttributeError):
            raise TargetError(f"{self.base}/v1/models did not return a model list") from None
        if not data:
            raise TargetError(f"{self.base} serves no models")
        chosen = next((m for m in data if m["id"] == self.req.model), None) if self.req.model else data[0]
        if chosen is None:
            raise BadInputError(f"model {self.req.model!r} is not served by {self.base}; served: "
                                f"{', '.join(str(m['id']) for m in data)}")
        self.model = str(chosen["id"])
        self.max_model_len = chosen.get("max_model_len")
        with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
            v = await self.ctl.get("/version")
            if v.status_code == 200:
                self.version = str(v.json().get("version"))
        self.tok = workloads.ServerTokenizer(self.ctl, self.model, self.req.endpoint == "chat")
        if self.max_model_len and self.req.dataset is None \
                and self.req.input_len + self.req.output_len > self.max_model_len:
            raise BadInputError(f"input_len + output_len = {self.req.input_len + self.req.output_len} exceeds the "
                                f"server's max_model_len {self.max_model_len}")

    async def build(self, n: int, seed: int, lens: list[tuple[int | None, int | None]] | None = None,
                    ) -> tuple[list[workloads.WorkItem], workloads.WorkloadInfo]:
        req = self.req
        assert self.tok is not None
        kind = req.dataset_kind or (("jsonl" if req.dataset.endswith(".jsonl") else "sharegpt") if req.dataset
                                    else ("shared-prefix" if req.prefix_len else "random"))
        if kind in ("sharegpt", "jsonl"):
            if not req.dataset:
                raise BadInputError(f"dataset_kind {kind} needs a dataset file")
            return await workloads.build_from_file(self.tok, kind=kind, path=req.dataset, n=n,
                                                   output_len=req.output_len, seed=seed,
                                                   max_model_len=self.max_model_len)
        if lens is None and req.range_ratio > 0:
            lens = spread_lengths(n, req.input_len, req.output_len, req.range_ratio, seed)
        input_lens = [(ln[0] if ln and ln[0] else req.input_len) for ln in (lens or [(None, None)] * n)]
        output_lens = [(ln[1] if ln and ln[1] else req.output_len) for ln in (lens or [(None, None)] * n)]
        return await workloads.build_random(self.tok, n=n, input_lens=input_lens, output_lens=output_lens, seed=seed,
                                            prefix_len=req.prefix_len, num_prefixes=req.num_prefixes)

    def bodies(self, items: list[workloads.WorkItem]) -> list[bytes]:
        return [build_body(self.req.endpoint, self.model, it.prompt, it.output_len, ignore_eos=self.req.ignore_eos)
                for it in items]

    async def count_missing_usage(self, log: RecordLog) -> int:
        """Output tokens for responses that carried no usage block, via the server's tokenizer."""
        missing = [k for k in log.ok_rows() if not log.usage_reported(k)]
        if not missing or self.tok is None:
            return 0
        for k in missing:
            text = log.texts.get(k, "")
            try:
                log.output_len[k] = len(await self.tok.ids(text)) if text else 0
            except TargetError:
                log.output_len[k] = max(1, log.chunks[k])
        return len(missing)


def _schedule(req: RunBenchmarkInput, n: int, seed: int, rate: float | None = None,
              ) -> tuple[list[float] | None, list[tuple[int | None, int | None]] | None, float | str]:
    """(offsets or None for closed loop, per-request lengths from a trace, request_rate for the result)."""
    if req.trace:
        entries = arrivals.read_trace(req.trace)[:n]
        span = entries[-1].offset_s if len(entries) > 1 else 0.0
        return [e.offset_s for e in entries], [(e.input_len, e.output_len) for e in entries], \
            (len(entries) / span if span else "inf")
    if req.ramp_start_rate is not None and req.ramp_end_rate is not None and rate is None:
        assert req.duration_s is not None
        offsets = arrivals.ramp_schedule(n, req.ramp_start_rate, req.ramp_end_rate, req.duration_s, seed=seed)
        return offsets, None, "ramp"
    r = rate if rate is not None else req.rate
    if r is None:
        return None, None, "inf"
    kind: arrivals.ArrivalKind = "gamma" if req.arrival == "gamma" or (req.arrival == "poisson"
                                                                       and req.burstiness != 1.0) else req.arrival
    return arrivals.rate_schedule(n, r, kind=kind, burstiness=req.burstiness, seed=seed), None, r


def _request_count(req: RunBenchmarkInput) -> int:
    if req.num_prompts:
        return req.num_prompts
    if req.trace:
        return min(MAX_REQUESTS, len(arrivals.read_trace(req.trace)))
    if req.duration_s:
        rate = req.rate or max(req.ramp_start_rate or 0, req.ramp_end_rate or 0)
        if rate:
            return min(MAX_REQUESTS, int(rate * req.duration_s * 1.3) + 16)
        return min(MAX_REQUESTS, 2_000)  # closed loop for a duration: prompts are reused beyond this many
    return DEFAULT_PROMPTS


async def _stop_watch(watch: ServerWatch, s: _Session) -> str | None:
    """The last scrape, then the window saved for a later diagnose; a cancelled run keeps what it had."""
    try:
        await watch.stop()
    finally:
        note = save_window(watch, s.scrape_dir, s.base, max_bytes=CONTROL_MAX_BYTES) if s.scrape_dir else None
    return note


async def _measure(s: _Session, *, n: int, seed: int, rate: float | None, concurrency: int | None,
                   progress: Progress, stop: Callable[[], bool], report: ProgressCallback | None,
                   phase: str) -> dict[str, Any]:
    """One measured run: build prompts, warm up, load, scrape, and the result dict."""
    req = s.req
    offsets, lens, request_rate = _schedule(req, n, seed, rate)
    if offsets is not None:
        n = len(offsets)
    items, info = await s.build(n + req.warmup_requests, seed, (lens + [(None, None)] * req.warmup_requests)
                                if lens else None)
    bodies = s.bodies(items)
    warm, measured = bodies[:req.warmup_requests], bodies[req.warmup_requests:]
    if concurrency is None and offsets is None:
        concurrency = req.concurrency or 1
    cap = concurrency if offsets is None else req.max_concurrency
    if offsets is not None and req.duration_s and req.num_prompts is None:
        pass  # the schedule already covers the window; the runner stops at the deadline
    elif offsets is None and req.duration_s and len(measured) < MAX_REQUESTS:
        reps = math.ceil(MAX_REQUESTS / max(1, len(measured)))
        measured = (measured * reps)[:MAX_REQUESTS]
        info.notes.append(f"closed loop for {req.duration_s:g} s: {len(items) - req.warmup_requests} prompts are "
                          "reused in order (later repeats may hit the prefix cache)")
    plan = LoadPlan(s.base, req.endpoint, measured, offsets, cap, req.duration_s, req.request_timeout_s,
                    min(30.0, req.request_timeout_s), s.key, s.policy)
    progress.total = len(measured)
    if warm:
        await warm_up(plan, warm, min(len(warm), 4))
    watch = ServerWatch(s.ctl) if req.scrape_metrics else None
    if watch:
        await watch.start()
    workers = choose_workers(plan, req.workers)
    reporter = asyncio.create_task(_report_loop(progress, report, phase)) if report else None
    saved_note: str | None = None
    try:
        outcome = await run_load(plan, workers=workers, stop=stop, progress=progress)
    finally:
        if reporter:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
        if watch:
            saved_note = await _stop_watch(watch, s)
    log = outcome.records
    cancelled_in_flight = [k for k in range(len(log)) if log.error(k) == CANCELLED_ERROR]
    records = log.select(k for k in range(len(log)) if log.error(k) != CANCELLED_ERROR) if cancelled_in_flight else log
    counted = await s.count_missing_usage(records)
    # The SLO percentile is always computed, so the targets are judged where the caller said (and a capacity
    # search finds it in every step's result).
    percentiles = sorted({*req.percentiles, req.slo_percentile}) if req.slo else req.percentiles
    metrics = compute_metrics(records, outcome.duration, percentiles=percentiles, slo_ms=req.slo or None)
    check = check_schedule(outcome, plan)
    backend = "openai-chat" if req.endpoint == "chat" else "vllm"
    result: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y%m%d-%H%M%S"), "endpoint_type": backend, "backend": backend,
        "label": req.label, "model_id": s.model, "tokenizer_id": s.model, "num_prompts": len(records),
        "request_rate": request_rate, "burstiness": req.burstiness, "max_concurrency": cap,
    }
    result.update(metrics)
    errors: dict[str, int] = {}
    for k in range(len(records)):
        if not records.success(k):
            key = s.redact(records.error(k))[:120]
            errors[key] = errors.get(key, 0) + 1
    result["client_check"] = {
        **check.__dict__, "workers": outcome.workers, "stop_reason": outcome.stop_reason,
        "cancelled_in_flight": len(cancelled_in_flight), "not_sent": len(measured) - outcome.sent,
        "output_tokens_counted_by_tokenize": counted, "warmup_requests": len(warm),
        "exact_input_lengths": info.exact_input_lengths, "input_length_mismatches": info.length_mismatches,
        "tokenizer_roundtrip_ok": info.tokenizer_roundtrip_ok, "errors": errors, "notes": info.notes,
    }
    if watch:
        window = watch.summary(metrics.get("mean_ttft_ms"), outcome.started_at)
        if window.scrapes:
            await attach_diagnosis(window, watch, slo_ms=req.slo, serve_flags=req.serve_flags,
                                   slo_percentile=req.slo_percentile)
        if saved_note:
            window.notes.append(saved_note)
        result["server"] = window.model_dump(mode="json")
        cache_config = window.cache_config
    else:
        cache_config = {}
    prov = collect(server_url=s.base, server_version=s.version, model=s.model, max_model_len=s.max_model_len,
                   cache_config=cache_config, caller_flags=req.serve_flags, seed=seed,
                   workload={"kind": info.kind, "input_len": req.input_len, "output_len": req.output_len,
                             **({"range_ratio": req.range_ratio} if req.range_ratio else {}),
                             "endpoint": req.endpoint, "ignore_eos": req.ignore_eos, **info.params},
                   load={"phase": phase, "rate": rate if rate is not None else req.rate, "concurrency": concurrency,
                         "arrival": req.arrival, "burstiness": req.burstiness, "duration_s": req.duration_s,
                         "max_concurrency": cap, "workers": outcome.workers})
    prov.finished_utc = utc_now()
    result["provenance"] = prov.model_dump(mode="json")
    if req.slo:
        result["slo_ms"] = dict(req.slo)
        result["slo_percentile"] = req.slo_percentile
        result["slo_checks"] = [c.model_dump(mode="json") for c in slo_checks(result, req.slo, req.slo_percentile)]
    return result


async def _report_loop(progress: Progress, report: ProgressCallback, phase: str) -> None:
    last = -1
    while True:
        await asyncio.sleep(0.5)
        if progress.done != last:
            last = progress.done
            with contextlib.suppress(Exception):
                await report(float(progress.done), float(progress.total),
                             f"{phase}: {progress.done}/{progress.total} done, {progress.failed} failed")


def _warnings(result: dict[str, Any]) -> list[str]:
    out = list(result.get("client_check", {}).get("reasons", []))
    check = result.get("client_check", {})
    if result.get("failed"):
        out.append(f"{result['failed']} requests failed: {', '.join(list(check.get('errors', {}))[:3])}")
    if check.get("stop_reason") == "cancelled":
        out.append("run cancelled: results cover the requests that finished before the cancel")
    if check.get("exact_input_lengths") is False:
        out.append("input lengths are approximate (the server has no /tokenize)")
    completed = result.get("completed", 0)
    if 0 < completed < 200:
        out.append(f"only {completed} requests: p99 values are unstable below about 200 requests")
    return out


async def run_benchmark(req: RunBenchmarkInput, *, report: ProgressCallback | None = None,
                        stop: Callable[[], bool] = lambda: False, run_id: str | None = None,
                        policy: TargetPolicy | None = None) -> RunBenchmarkOutput:
    """Run the benchmark (and capacity search) in this task; results are saved under the results directory."""
    if req.simulate is not None:  # the search is simulated: only a calibration probe or a verify run is sent
        from vllm_tune.tools.whatif.capacity import simulated_search

        return await simulated_search(req, report=report, run_id=run_id, policy=policy)
    pol = policy or TargetPolicy.from_env()
    base = check_target(req, pol)
    key = api_key()
    store = ResultStore(results_dir(req.save_result))
    rid = run_id or new_run_id()
    writer = StatusWriter(store, RunStatus(run_id=rid, state="running", phase="starting"))
    writer.update(force=True)
    progress = Progress(0)
    started = time.monotonic()

    def stop_all() -> bool:
        return stop() or time.monotonic() - started > MAX_DURATION_S

    async def on_progress(done: float, total: float | None, message: str) -> None:
        writer.update(sent=progress.sent, done=progress.done, failed=progress.failed, total=progress.total,
                      message=message)
        if report:
            await report(done, total, message)

    try:
        async with async_guarded_client(pol, base_url=base, headers=auth_headers(key), timeout=30.0,
                                        deadline_s=CONTROL_DEADLINE_S, max_bytes=CONTROL_MAX_BYTES) as ctl:
            session = _Session(req, base, key, ctl, pol)
            await session.probe()
            capacity: CapacityResult | None = None
            if req.search_capacity:
                steps = 0

                async def measure(variable: SearchVariable, value: float, phase: str) -> dict[str, Any]:
                    nonlocal steps
                    steps += 1
                    writer.update(force=True, phase=f"capacity step {steps} ({phase} {variable}={value:g})")
                    if report:
                        await report(float(steps), None, f"capacity step {steps}: {phase} {variable}={value:g}")
                    rate = value if variable == "rate" and phase != "probe" else None
                    conc = int(value) if variable == "concurrency" or phase == "probe" else None
                    return await _measure(session, n=req.search_prompts, seed=req.seed + steps, rate=rate,
                                          concurrency=conc, progress=progress, stop=stop_all, report=None,
                                          phase=phase)

                capacity = await search_capacity(
                    measure, variable=req.search_variable, slo_ms=req.slo, pct=req.slo_percentile,
                    upper=req.search_max, probe_concurrency=req.concurrency or min(64, MAX_CONCURRENCY),
                    repeats=req.search_repeats, should_stop=stop_all)
                result: dict[str, Any] | None = None
                full = {"vllm_tune": {"run_id": rid, "kind": "capacity"}, "capacity": capacity.model_dump(mode="json")}
                path = store.write_result(rid, full)
            else:
                n = min(_request_count(req), MAX_REQUESTS)
                session.scrape_dir = store.run_dir(rid)
                writer.update(force=True, phase="building prompts", total=n)
                result = await _measure(session, n=n, seed=req.seed, rate=req.rate, concurrency=req.concurrency,
                                        progress=progress, stop=stop_all, report=on_progress, phase="measure")
                result["vllm_tune"] = {"run_id": rid, "kind": "benchmark"}
                path = store.write_result(rid, result)
    except asyncio.CancelledError:
        writer.update(force=True, state="cancelled", message="cancelled before results were saved")
        raise
    except Exception as exc:
        writer.update(force=True, state="failed", message=SecretRedactor([key] if key else None)(str(exc))[:300])
        raise
    cancelled = stop()
    out = RunBenchmarkOutput(run_id=rid, state="cancelled" if cancelled else "completed", result_path=str(path),
                             capacity=capacity)
    if result is not None:
        out.result = BenchResult.model_validate(result)
        out.warnings = _warnings(result)
    if req.plot:
        from vllm_tune.tools.bench.plots import write_plots

        out.plots, note = write_plots(path.parent, result, capacity)
        if note:
            out.warnings.append(note)
    writer.update(force=True, state=out.state, result_path=str(path), phase="done", sent=progress.sent,
                  done=progress.done, failed=progress.failed)
    return out


def benchmark_status(ref: RunRef) -> RunStatus:
    return ResultStore(results_dir(ref.save_result)).read_status(ref.run_id)


def benchmark_results(ref: RunRef) -> dict[str, Any]:
    return ResultStore(results_dir(ref.save_result)).read_result(ref.run_id)


def result_file(ref: RunRef) -> Path:
    return ResultStore(results_dir(ref.save_result)).run_dir(ref.run_id) / "result.json"


class ResultsRef(RunRef):
    detail: bool = Field(default=False, description="include per-request arrays (ttfts, itls, ...)")


class BenchmarkResultsOutput(BaseModel):
    run_id: str
    state: str
    result_path: str
    result: dict[str, Any] = Field(description="the saved result JSON (vllm bench serve fields plus our blocks)")
    omitted: list[str] = Field(default_factory=list,
                               description="per-request arrays left out (detail=false); they stay in the file")


# Above this many items a top-level list is per-request data (one value per request): summaries never need it.
_PER_REQUEST_MIN = 50


def load_results(ref: RunRef) -> BenchmarkResultsOutput:
    status = benchmark_status(ref)
    if status.state == "running":
        raise BadInputError(f"benchmark run {ref.run_id} is still running ({status.done}/{status.total} done); "
                            + say(mcp="poll benchmark_status", cli="wait for it to finish"))
    result = benchmark_results(ref)
    omitted: list[str] = []
    if not getattr(ref, "detail", True):
        for key in [k for k, v in result.items() if isinstance(v, list) and len(v) >= _PER_REQUEST_MIN]:
            omitted.append(f"{key} ({len(result.pop(key))} values)")
    return BenchmarkResultsOutput(run_id=ref.run_id, state=status.state, result_path=str(result_file(ref)),
                                  result=result, omitted=omitted)
