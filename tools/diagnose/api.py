"""diagnose_metrics: the domain entry point shared by the CLI and the MCP tool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vllm_tune.tools.diagnose import names
from vllm_tune.tools.diagnose.advice import Advisor, next_steps
from vllm_tune.tools.diagnose.capacity import capacity_from_log, capacity_from_window, effective_flags, merge_log_into
from vllm_tune.tools.diagnose.collect import probe, scrape_window, window_from_texts
from vllm_tune.tools.diagnose.engine import evaluate
from vllm_tune.tools.diagnose.latency import latency_from_window
from vllm_tune.tools.diagnose.logs import LogFacts, parse_log
from vllm_tune.tools.diagnose.models import (
    Abstention,
    Capacity,
    DiagnoseOutput,
    Latency,
    ServeFlags,
    ServerInfo,
    SloResult,
    SloTargets,
    Workload,
)
from vllm_tune.tools.diagnose.prometheus import read_prometheus_async
from vllm_tune.tools.diagnose.quantiles import fraction_at_or_below
from vllm_tune.tools.diagnose.signals import DEFAULT_TARGETS_MS, MIN_REQUESTS_FOR_DIAGNOSIS, Inputs, compute_signals
from vllm_tune.tools.diagnose.snapshot import Histogram
from vllm_tune.tools.diagnose.window import Window
from vllm_tune.tools.errors import BadInputError, TargetError, VllmTuneError
from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.net.http import http_client
from vllm_tune.tools.net.targets import TargetPolicy
from vllm_tune.tools.net.vllm_probe import VllmServerInfo

Progress = Callable[[float, float, str], Awaitable[None]]
DEFAULT_WINDOW_S = 10.0
DEFAULT_PROMETHEUS_WINDOW_S = 300.0
MAX_LOG_BYTES = 64 * 1024 * 1024


class MetricsText(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="metrics", max_length=500, description="label for messages, e.g. the file name")
    text: str = Field(description="Prometheus exposition text as served by vLLM's /metrics")


class DiagnoseInput(BaseModel):
    """What to diagnose: any combination of a live server, Prometheus, saved scrapes and a server log."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, description="live vLLM server base URL; /metrics is scraped at the "
                            "start and end of the window (and every sample_interval_s in between)")
    prometheus_url: str | None = Field(default=None, description="Prometheus server scraping the vLLM replicas")
    prometheus_selector: str | None = Field(default=None, max_length=2000,
                                            description='PromQL label matchers, e.g. pod=~"vllm-.*",namespace="prod"')
    prometheus_end: float | None = Field(default=None, description="end of the range (unix seconds; default now)")
    metrics: list[MetricsText] = Field(default=[], max_length=2, description="saved /metrics texts: one "
                                       "(lifetime view) or two, earlier first (a window)")
    log_text: str | None = Field(default=None, description="vLLM server log text (stats lines, start-up lines)")
    window_s: float | None = Field(default=None, ge=0, le=86_400, description="window length in seconds: live "
                                   "scrape window (default 10), Prometheus range (default 300) or the time between "
                                   "two saved scrapes")
    sample_interval_s: float = Field(default=1.0, ge=0.2, le=60, description="live gauge sampling interval")
    slo: SloTargets = Field(default=SloTargets(), description="latency targets (ms) judged at p90; without "
                            "them default interactive targets are used and said so")
    serve_flags: ServeFlags = Field(default=ServeFlags(), description="known server flags (metrics do not "
                                    "export max_num_seqs or max_num_batched_tokens)")
    model: str | None = Field(default=None, max_length=500, description="only this served model (model_name label)")

    @model_validator(mode="after")
    def _has_input(self) -> DiagnoseInput:
        if not (self.url or self.prometheus_url or self.metrics or self.log_text):
            raise ValueError("give at least one of: url, prometheus_url, metrics, log_text")
        if self.log_text is not None and len(self.log_text) > MAX_LOG_BYTES:
            raise ValueError("log_text is larger than 64 MiB")
        return self


def _slo_results(latency: Latency, hists: dict[str, Histogram], targets: SloTargets) -> dict[str, SloResult]:
    out: dict[str, SloResult] = {}
    for key in ("ttft", "itl", "tpot", "e2el"):
        target = getattr(targets, f"{key}_ms")
        if target is None:
            continue
        p = getattr(latency, key)
        hist = hists.get(key)
        if p is None or p.p90_ms is None or hist is None:
            out[key] = SloResult(target_ms=target, observed_p90_ms=None, status="unknown",
                                 note="no observations in the window")
            continue
        share = fraction_at_or_below(hist, target / 1000.0)
        note = None
        if p.p90_bucket_ms and p.p90_bucket_ms[0] < target < p.p90_bucket_ms[1]:
            note = (f"the target lies inside the p90 bucket {p.p90_bucket_ms[0]:g}-{p.p90_bucket_ms[1]:g} ms; "
                    "the verdict rests on interpolation")
        out[key] = SloResult(target_ms=target, observed_p90_ms=round(p.p90_ms, 3),
                             status="met" if p.p90_ms <= target else "violated",
                             share_within_target=None if share is None else round(share, 4), note=note)
    return out


def _engines(window: Window) -> int:
    running = window.after.gauges.get("num_requests_running", {})
    return max(1, len({ident for ident, _ in running}))


def _moe_args(log: LogFacts | None) -> dict[str, object] | None:
    if log is None or not log.moe_default_config:
        return None
    w = log.moe_default_config[0]
    args: dict[str, object] = {k: v for k, v in (("num_experts", w.experts), ("shard_intermediate_size", w.n),
                                                 ("device_name", w.device_name), ("dtype", w.dtype),
                                                 ("block_shape", w.block_shape)) if v is not None}
    if w.path:
        args["missing_config_file"] = w.path.rsplit("/", 1)[-1]
    return args


class _Collected:
    def __init__(self) -> None:
        self.window: Window | None = None
        self.log: LogFacts | None = None
        self.server = ServerInfo()
        self.sources: list[str] = []
        self.caveats: list[str] = []
        self.cross_check: dict[str, float] = {}
        self.failures: list[VllmTuneError] = []


async def _collect_live(request: DiagnoseInput, policy: TargetPolicy, got: _Collected,
                        progress: Progress | None) -> None:
    assert request.url is not None
    base = policy.check(request.url)
    got.server.url = base
    window_s = DEFAULT_WINDOW_S if request.window_s is None else request.window_s
    with http_client(policy) as client:
        # /metrics first: an unreachable or non-vLLM target fails here with a precise message.
        window = await scrape_window(client, base, window_s, request.sample_interval_s, progress)
        got.window = window
        try:
            info: VllmServerInfo = await probe(client, base)
            got.server.version, got.server.models = info.version, info.models
        except VllmTuneError as exc:
            got.caveats.append(f"/version and /v1/models could not be read ({exc}); version-specific rules all apply")
    got.sources.append(f"{base}/metrics scraped {window.n_samples} time(s) over "
                       f"{window.seconds or 0:.1f} s; {base}/version and /v1/models")


async def _collect_prometheus(request: DiagnoseInput, policy: TargetPolicy, got: _Collected) -> None:
    assert request.prometheus_url is not None
    base = policy.check(request.prometheus_url)
    window_s = DEFAULT_PROMETHEUS_WINDOW_S if request.window_s is None else request.window_s
    if window_s <= 0:
        raise BadInputError("a Prometheus range needs window_s > 0")
    with http_client(policy, send_api_key=False) as client:
        window, cross, used = await read_prometheus_async(client, base, selector=request.prometheus_selector,
                                                          model=request.model, window_s=window_s,
                                                          end=request.prometheus_end)
    got.window, got.cross_check = window, cross
    got.sources.extend(used)


async def _collect(request: DiagnoseInput, policy: TargetPolicy, progress: Progress | None) -> _Collected:
    got = _Collected()
    if request.log_text is not None:
        got.log = parse_log(request.log_text)
        got.sources.append(f"server log ({got.log.lines} lines, {len(got.log.stats)} stats lines)")
        if got.log.empty:
            got.caveats.append("the log has no vLLM stats, start-up or args lines")
    attempts: list[tuple[str, Callable[[], Awaitable[None]]]] = []
    if request.url:
        attempts.append(("live server", lambda: _collect_live(request, policy, got, progress)))
    if request.prometheus_url:
        attempts.append(("Prometheus", lambda: _collect_prometheus(request, policy, got)))
    for what, attempt in attempts:
        if got.window is not None:
            break
        try:
            await attempt()
        except BadInputError:
            raise
        except VllmTuneError as exc:
            got.failures.append(exc)
            got.caveats.append(f"{what} could not be read: {exc}")
    if got.window is None and request.metrics:
        got.window = window_from_texts([(m.name, m.text) for m in request.metrics], request.window_s)
        got.sources.extend(f"metrics text: {m.name}" for m in request.metrics)
        if got.window.seconds:
            got.sources.append(f"window between the two scrapes: {got.window.seconds:g} s")
    if got.window is None and (got.log is None or got.log.empty):
        if got.failures:
            raise TargetError(str(got.failures[0]))
        raise BadInputError("nothing to diagnose: no metrics could be read and the log has no vLLM lines")
    return got


def _select_model(window: Window, model: str | None, caveats: list[str]) -> Window:
    models = window.after.model_names()
    if model:
        if models and model not in models:
            raise BadInputError(f"model {model!r} is not in the metrics; models there: {', '.join(models)}")
        window.after = window.after.select(model)
        if window.before is not None:
            window.before = window.before.select(model)
        window.samples = [s.select(model) for s in window.samples]
    elif len(models) > 1:
        caveats.append(f"{len(models)} models share this server ({', '.join(models)}); their series are summed; "
                       "pass model for one")
    return window


def _verdict(out: DiagnoseOutput, idle: bool, few: bool) -> str:
    top = next((f for f in out.findings if f.severity != "info"), None)
    if top is not None:
        out.bottleneck = top.id
        return f"{top.title} [{top.id}, {top.severity}, {top.confidence} confidence]"
    if idle:
        return "idle: no requests ran in the window, nothing to diagnose"
    violated = [k for k, r in out.slo.items() if r.status == "violated"]
    if few:
        return "abstaining: too few requests finished in the window; use a longer window"
    if violated:
        return (f"abstaining: {', '.join(violated)} over target but no triage rule matched the signals; "
                "not enough signal to name a bottleneck")
    if out.view == "log-only" and not out.findings:
        return "no problem visible in the log; give metrics for latency and SLO checks"
    what = "SLO met" if out.slo_source == "user" else "default targets met"
    return f"healthy: no bottleneck at warning level ({what})"


def _log_workload(log: LogFacts) -> Workload:
    w = Workload()
    busy = [s for s in log.stats if s.running or s.waiting]
    if busy:
        w.running_mean = sum(s.running for s in busy) / len(busy)
        w.waiting_mean = sum(s.waiting for s in busy) / len(busy)
    if log.stats:
        w.prompt_tokens_per_s = sum(s.prompt_tps for s in log.stats) / len(log.stats)
        w.generation_tokens_per_s = sum(s.generation_tps for s in log.stats) / len(log.stats)
        w.concurrency_source = f"{len(busy)} busy periodic stats line(s) in the log"
    return w


def analyse(got: _Collected, request: DiagnoseInput) -> DiagnoseOutput:
    """Everything after collection: pure computation over what was read."""
    caveats = list(got.caveats)
    log, window = got.log, got.window
    server = got.server
    if server.version is None and log is not None:
        server.version = log.version
    max_len = next((m.max_model_len for m in server.models if m.max_model_len), None)
    flags, seqs_source = effective_flags(request.serve_flags, log, max_len)
    targets = request.slo if request.slo.given() else DEFAULT_TARGETS_MS
    slo_source: Literal["user", "default"] = "user" if request.slo.given() else "default"
    hists: dict[str, Histogram] = {}
    if window is not None:
        window = _select_model(window, request.model, caveats)
        caveats.extend(window.caveats)
        latency, hists = latency_from_window(window)
        workload = _workloads(window, hists)
        capacity = capacity_from_window(window, flags, workload.finished_requests)
        if log is not None:
            merge_log_into(capacity, log)
        server.model_names_in_metrics = window.after.model_names()
        server.engines = len(window.after.engines())
        server.multiprocess_api_servers = window.after.multiprocess
        view: Literal["window", "lifetime", "log-only"] = window.kind
    else:
        assert log is not None
        latency, workload, capacity, view = Latency(), _log_workload(log), capacity_from_log(log, flags), "log-only"
        caveats.append("diagnosed from the server log only: no latency histograms, so TTFT/TPOT rules abstain")
    capacity.max_num_seqs_source = seqs_source or None
    inputs = Inputs(window=window, log=log, workload=workload, latency=latency, capacity=capacity, hists=hists,
                    flags=flags, targets=targets, engines=_engines(window) if window is not None else 1)
    signals = compute_signals(inputs)
    finished = workload.finished_requests or 0
    cap: Literal["medium"] | None = "medium" if window is not None and finished < 20 else None
    findings, abstained = evaluate(load_knowledge(), signals, version=server.version,
                                   advise=Advisor(workload, capacity, flags), confidence_cap=cap)
    if flags.enforce_eager:  # no CUDA graphs: the graph-miss rule cannot apply, so it is not "undecided"
        abstained = [a for a in abstained if a.id != "triage.itl-spikes-graph-miss"]
    idle = window is not None and finished == 0 and not (capacity.running_max or capacity.waiting_max)
    few = window is not None and not idle and finished < MIN_REQUESTS_FOR_DIAGNOSIS
    out = DiagnoseOutput(verdict="", findings=findings, abstained=abstained, workload=workload, latency=latency,
                         capacity=capacity, slo_source=slo_source,
                         signals=signals.values, caveats=caveats, sources_used=got.sources,
                         view=view,
                         window_s=window.seconds if window is not None else None, server=server)
    out.latency.promql_cross_check = got.cross_check
    if window is not None and window.before is not None:
        out.window_start_unix, out.window_end_unix = window.before.timestamp, window.after.timestamp
    out.slo = _slo_results(latency, hists, targets)
    _notes(out, window, flags, slo_source, few, capacity)
    if few:
        out.abstained.append(Abstention(id="diagnosis", reason=f"only {finished} request(s) finished in the window; "
                                        f"latency rules need at least {MIN_REQUESTS_FOR_DIAGNOSIS}"))
    out.verdict = _verdict(out, idle, few)
    model = request.model or (server.models[0].id if server.models else None)
    out.next_steps = next_steps(finding_ids=[f.id for f in findings], workload=workload, capacity=capacity,
                                url=server.url, model=model, moe=_moe_args(log), needs_longer_window=few,
                                window_s=out.window_s)
    return out


def _workloads(window: Window, hists: dict[str, Histogram]) -> Workload:
    from vllm_tune.tools.diagnose.workload import workload_from_window

    return workload_from_window(window, hists)


def _notes(out: DiagnoseOutput, window: Window | None, flags: ServeFlags, slo_source: str, few: bool,
           capacity: Capacity) -> None:
    if slo_source == "default":
        out.caveats.append("no SLO given: latency is judged against default interactive targets (TTFT 3000 ms, "
                           "ITL/TPOT 200 ms at p90; starter alert thresholds attributed to the vllm-observability "
                           "skill); pass your SLO for a real verdict")
    if window is not None:
        if window.resets:
            out.caveats.append(f"counters went down during the window ({', '.join(sorted(window.resets))}): the "
                               "server restarted; values after the restart are used")
        if window.after.legacy_names:
            out.caveats.append("old metric names were read and mapped to current ones: "
                               + ", ".join(f"{o} -> {names.RENAMED[o]}" for o in sorted(window.after.legacy_names)))
        if window.after.multiprocess:
            out.caveats.append("API-server multiprocess mode (pid labels): counters were summed and gauges take "
                               "the largest value per series")
    if flags.max_num_seqs is None:
        out.caveats.append("max_num_seqs unknown (pass it or the server log): rules comparing running requests to "
                           "the limit abstain")
    if flags.enforce_eager:
        out.caveats.append("the server runs with --enforce-eager: no CUDA graphs, so graph-miss ITL spikes do not "
                           "apply")
    for key in ("ttft", "itl", "tpot"):
        p = getattr(out.latency, key)
        if p is not None:
            out.caveats.extend(c for c in p.caveats if "p90" in c or "observations" in c)
    if capacity.kv_usage_max is not None and out.view == "window" and capacity.gauge_samples <= 2:
        out.caveats.append("KV usage, running and waiting were read at the two ends only; peaks in between are "
                           "not seen")
    if few:
        out.caveats.append("too few requests finished in the window for latency rules")
    if window is not None and window.kind == "lifetime":
        start = window.after.process_start_time
        if start and window.after.timestamp and window.after.timestamp > start:
            out.caveats.append(f"lifetime view over {window.after.timestamp - start:.0f} s since the server started")
    out.caveats = list(dict.fromkeys(out.caveats))


async def diagnose_metrics(request: DiagnoseInput, *, policy: TargetPolicy | None = None,
                           progress: Progress | None = None) -> DiagnoseOutput:
    """Diagnose a vLLM deployment from what the request names; network targets must pass `policy`
    (default: the VLLM_TUNE_ALLOWED_TARGETS allowlist plus loopback)."""
    got = await _collect(request, policy or TargetPolicy.from_env(), progress)
    return analyse(got, request)


def diagnose_texts(texts: list[tuple[str, str]], *, window_s: float | None = None, log_text: str | None = None,
                   slo: SloTargets | None = None, serve_flags: ServeFlags | None = None,
                   model: str | None = None) -> DiagnoseOutput:
    """Offline convenience: diagnose saved scrapes (no network)."""
    request = DiagnoseInput(metrics=[MetricsText(name=n, text=t) for n, t in texts], window_s=window_s,
                            log_text=log_text, slo=slo or SloTargets(), serve_flags=serve_flags or ServeFlags(),
                            model=model)
    got = _Collected()
    if log_text is not None:
        got.log = parse_log(log_text)
    got.window = window_from_texts(texts, window_s)
    got.sources = [f"metrics text: {n}" for n, _ in texts]
    return analyse(got, request)


__all__ = ["DiagnoseInput", "DiagnoseOutput", "MetricsText", "ServeFlags", "SloTargets", "diagnose_metrics",
           "diagnose_texts"]
