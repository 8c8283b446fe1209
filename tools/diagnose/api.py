"""diagnose_metrics: the domain entry point shared by the CLI and the MCP tool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
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
    Finding,
    Latency,
    ServeFlags,
    ServerInfo,
    Workload,
)
from vllm_tune.tools.diagnose.prometheus import read_prometheus_async
from vllm_tune.tools.diagnose.quantiles import fraction_at_or_below
from vllm_tune.tools.diagnose.signals import (
    DEFAULT_TARGETS_MS,
    MIN_REQUESTS_FOR_DIAGNOSIS,
    Inputs,
    compute_signals,
    indicates_problem,
)
from vllm_tune.tools.diagnose.snapshot import Histogram
from vllm_tune.tools.diagnose.timing import counter_contradictions, warmup_reason
from vllm_tune.tools.diagnose.window import Window
from vllm_tune.tools.errors import BadInputError, TargetError, VllmTuneError
from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.net.http import http_client
from vllm_tune.tools.net.targets import TargetPolicy
from vllm_tune.tools.net.vllm_probe import VllmServerInfo
from vllm_tune.tools.slo import SLO_METRICS, SloCheck, SloInput, SloTargets, judge_bounds, judge_value, percentile_label

Progress = Callable[[float, float, str], Awaitable[None]]
DEFAULT_WINDOW_S = 10.0
DEFAULT_PROMETHEUS_WINDOW_S = 300.0
MAX_LOG_BYTES = 64 * 1024 * 1024


class MetricsText(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="metrics", max_length=500, description="label for messages, e.g. the file name")
    text: str = Field(description="/metrics text (a `# vllm-tune capture: scraped_at=...` first "
                      "line dates it)")


class DiagnoseInput(BaseModel):
    """What to diagnose: any combination of a live server, Prometheus, saved scrapes and a server log."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, description="live vLLM server base URL; /metrics is scraped over "
                            "the window")
    prometheus_url: str | None = Field(default=None, description="Prometheus server scraping the vLLM replicas")
    prometheus_selector: str | None = Field(default=None, max_length=2000,
                                            description='PromQL label matchers, e.g. pod=~"vllm-.*",namespace="prod"')
    prometheus_end: float | None = Field(default=None, description="end of the range (unix seconds; default now)")
    metrics: list[MetricsText] = Field(default=[], max_length=2, description="saved /metrics texts: one "
                                       "(lifetime view) or two, earlier first (a window)")
    log_text: str | None = Field(default=None, description="vLLM server log text (stats lines, start-up lines)")
    metrics_files: list[str] = Field(default=[], max_length=2, description="saved /metrics files (paths): one, or "
                                     "two earlier first; capture.json beside them gives the window")
    log_file: str | None = Field(default=None, description="vLLM server log file (path)")
    run_id: str | None = Field(default=None, description="run_benchmark run id: its saved window")
    results_dir: str | None = Field(default=None, description="where run_id is looked up")
    window_s: float | None = Field(default=None, ge=0, le=86_400, description="window, s: live scrape (default 10), "
                                   "Prometheus range (default 300) or between two saved scrapes")
    sample_interval_s: float = Field(default=1.0, ge=0.2, le=60, description="live gauge sampling interval")
    slo: SloInput = Field(default=SloTargets(), description="latency targets in ms; unset ones use default "
                            "interactive targets")
    slo_percentile: Literal[50, 90, 95, 99] = Field(default=90, description="percentile the targets are judged at")
    captured_window_s: float | None = Field(default=None, gt=0, le=86_400, description="seconds between the two "
                                            "saved scrapes as recorded when they were taken (capture.json); a "
                                            "window_s that contradicts it is warned about and this one is used")
    serve_flags: ServeFlags = Field(default=ServeFlags(), description="known server flags (metrics do not "
                                    "export max_num_seqs or max_num_batched_tokens)")
    model: str | None = Field(default=None, max_length=500, description="only this served model (model_name label)")

    @model_validator(mode="after")
    def _has_input(self) -> DiagnoseInput:
        if not (self.url or self.prometheus_url or self.metrics or self.log_text or self.metrics_files
                or self.log_file or self.run_id):
            raise ValueError("give at least one of: url, prometheus_url, metrics, metrics_files, run_id, log_text, "
                             "log_file")
        if self.run_id and (self.url or self.prometheus_url or self.metrics or self.metrics_files):
            raise ValueError("run_id names the window to diagnose: give it without url, prometheus_url, metrics "
                             "or metrics_files")
        if self.metrics and self.metrics_files:
            raise ValueError("give saved scrapes either as metrics (text) or as metrics_files (paths), not both")
        if self.log_text is not None and len(self.log_text) > MAX_LOG_BYTES:
            raise ValueError("log_text is larger than 64 MiB")
        return self


def _slo_results(latency: Latency, targets: SloTargets, percentile: float) -> dict[str, SloCheck]:
    """Each target judged at the percentile from the bucket bounds that hold it, never from interpolation."""
    out: dict[str, SloCheck] = {}
    for key, target in targets.items().items():
        dist = getattr(latency, key)
        p = dist.at(percentile) if dist is not None else None
        if p is None:
            out[key] = SloCheck(metric=key, target_ms=target, percentile=percentile, status="unknown",
                                decided_by="no observations in the window")
        elif p.kind == "exact":
            out[key] = judge_value(key, target, percentile, p.value_ms)
        else:
            out[key] = judge_bounds(key, target, percentile, lower_ms=p.lower_ms, upper_ms=p.upper_ms,
                                    observed_ms=p.value_ms)
    return out


def _share_within(out: dict[str, SloCheck], hists: dict[str, Histogram]) -> None:
    for key, check in out.items():
        hist = hists.get(key)
        if hist is not None and check.status != "unknown":
            share = fraction_at_or_below(hist, check.target_ms / 1000.0)
            check.share_within_target = None if share is None else round(share, 4)


def _effective_targets(given: SloTargets) -> tuple[SloTargets, dict[str, str]]:
    """The operator's targets where given, the default interactive targets elsewhere (rules need a TTFT
    target to tell decode-bound from the rest even when the SLO names only ITL)."""
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for key in SLO_METRICS:
        mine, default = given.get(key), DEFAULT_TARGETS_MS.get(key)
        if mine is not None:
            values[key], sources[key] = mine, "your SLO"
        elif default is not None:
            values[key], sources[key] = default, "default"
    return SloTargets.model_validate(values), sources


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
        got.window = window_from_texts([(m.name, m.text) for m in request.metrics], request.window_s,
                                       request.captured_window_s)
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


def _latency_only(finding: Finding) -> bool:
    """A finding whose problem evidence is only latency: what warm-up inflates (queues and preemptions are not; the
    API server's first requests pay its own start-up, so the time outside the engine is latency too)."""
    problems = [ev for ev in finding.evidence if ev.holds and indicates_problem(ev.signal, ev.op)]
    return all(ev.signal.endswith("_over_target") or ev.signal in ("itl_p99_over_p50", "decode_share_of_e2el",
                                                                    "outside_engine_share_of_ttft")
               for ev in problems)


def _decided_by(finding: Finding) -> list[str]:
    return [ev.how + (" (undecided: the bucket reaches the target)" if ev.holds is None else "")
            for ev in finding.evidence if ev.signal.endswith("_over_target") and ev.how]


def _verdict(out: DiagnoseOutput, idle: bool, few: bool) -> str:
    label = percentile_label(out.slo_percentile)
    named = [f for f in out.findings if f.severity != "info" and not (out.warmup and _latency_only(f))]
    top = named[0] if named else None
    if top is not None:
        out.bottleneck = top.id
        decided = f"; decided by {'; '.join(top.decided_by)}" if top.decided_by else ""
        return f"{top.title} [{top.id}, {top.severity}, {top.confidence} confidence]{decided}"
    if out.warmup:
        return (f"warming up: {out.warmup}; one-time start-up costs are in these latencies, so no bottleneck is "
                "named; diagnose a later window")
    if idle:
        return "idle: no requests ran in the window, nothing to diagnose"
    violated = [k for k, r in out.slo.items() if r.status == "violated"]
    undecided = [k for k, r in out.slo.items() if r.status == "undecided"]
    if few:
        return "abstaining: too few requests finished in the window; use a longer window"
    if violated:
        return (f"abstaining: {', '.join(violated)} {label} over target but no triage rule matched the signals; "
                "not enough signal to name a bottleneck")
    if out.view == "log-only" and not out.findings:
        return "no problem visible in the log; give metrics for latency and SLO checks"
    if undecided:
        why = "; ".join(out.slo[k].decided_by for k in undecided)
        return (f"undecided: {why}, so the histogram cannot tell met from missed; no queue or preemption evidence "
                "points to a bottleneck")
    what = f"SLO met at {label}" if out.slo_source == "user" else f"default targets met at {label}"
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
    targets, target_sources = _effective_targets(request.slo)
    slo_source: Literal["user", "default"] = "user" if request.slo.given() else "default"
    percentile = float(request.slo_percentile)
    hists: dict[str, Histogram] = {}
    if window is not None:
        window = _select_model(window, request.model, caveats)
        caveats.extend(window.caveats)
        caveats.extend(counter_contradictions(window, flags.max_num_seqs, _engines(window)))
        latency, hists = latency_from_window(window, slo_percentile=percentile)
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
                    flags=flags, targets=targets, engines=_engines(window) if window is not None else 1,
                    slo_percentile=percentile, target_sources=target_sources)
    signals = compute_signals(inputs)
    finished = workload.finished_requests or 0
    cap: Literal["medium"] | None = "medium" if window is not None and finished < 20 else None
    findings, abstained = evaluate(load_knowledge(), signals, version=server.version,
                                   advise=Advisor(workload, capacity, flags), confidence_cap=cap)
    if flags.enforce_eager:  # no CUDA graphs: the graph-miss rule cannot apply, so it is not "undecided"
        abstained = [a for a in abstained if a.id != "triage.itl-spikes-graph-miss"]
    # A rule on a latency nobody set a target for does not apply; it is not waiting for data.
    untargeted = {f"{k}_over_target" for k in SLO_METRICS if targets.get(k) is None}
    abstained = [a for a in abstained if not untargeted & set(a.missing_signals)]
    idle = window is not None and finished == 0 and not (capacity.running_max or capacity.waiting_max)
    few = window is not None and not idle and finished < MIN_REQUESTS_FOR_DIAGNOSIS
    for finding in findings:
        finding.decided_by = _decided_by(finding)
    out = DiagnoseOutput(verdict="", findings=findings, abstained=abstained, workload=workload, latency=latency,
                         capacity=capacity, slo_source=slo_source, slo_percentile=percentile,
                         targets_used={k: f"{v:g} ms at {percentile_label(percentile)} ({target_sources[k]})"
                                       for k, v in targets.items().items()},
                         warmup=warmup_reason(window, log),
                         signals=signals.values, caveats=caveats, sources_used=got.sources,
                         view=view,
                         window_s=window.seconds if window is not None else None, server=server)
    out.latency.promql_cross_check = got.cross_check
    if window is not None and window.before is not None:
        out.window_start_unix, out.window_end_unix = window.before.timestamp, window.after.timestamp
    out.slo = _slo_results(latency, request.slo if request.slo.given() else DEFAULT_TARGETS_MS, percentile)
    _share_within(out.slo, hists)
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
    label = percentile_label(out.slo_percentile)
    if slo_source == "default":
        out.caveats.append(f"no SLO given: latency is judged against default interactive targets (TTFT 3000 ms, "
                           f"ITL/TPOT 200 ms at {label}; starter alert thresholds attributed to the "
                           "vllm-observability skill); pass your SLO for a real verdict")
    if out.warmup:
        out.caveats.append(f"warm-up: {out.warmup}")
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
    for key in names.LATENCY_HISTOGRAMS:
        p = getattr(out.latency, key)
        if p is not None:
            out.caveats.extend(p.caveats)
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
    request = with_saved_files(request)
    got = await _collect(request, policy or TargetPolicy.from_env(), progress)
    return analyse(got, request)


SAVED_FILE_LIMIT = 64 * 1024 * 1024


def with_saved_files(request: DiagnoseInput) -> DiagnoseInput:
    """metrics_files and log_file read into texts, capped while reading and, over MCP, only under the file
    roots; the window of a `vllm-tune capture` pair comes from its capture.json."""
    if request.run_id:
        request = request.model_copy(update={"metrics_files": run_scrapes(request.run_id, request.results_dir),
                                             "run_id": None})
    if not (request.metrics_files or request.log_file):
        return request
    from vllm_tune.tools.diagnose.capture import captured_window
    from vllm_tune.tools.files import read_text

    update: dict[str, object] = {"metrics_files": [], "log_file": None}
    if request.metrics_files:
        update["metrics"] = [MetricsText(name=Path(f).name, text=read_text(f, limit=SAVED_FILE_LIMIT,
                                                                           what="metrics file", errors="replace"))
                             for f in request.metrics_files]
        if request.captured_window_s is None:
            update["captured_window_s"] = captured_window(list(request.metrics_files))
    if request.log_file:
        update["log_text"] = read_text(request.log_file, limit=SAVED_FILE_LIMIT, what="log file", errors="replace")
    return request.model_copy(update=update)


def run_scrapes(run_id: str, results: str | None = None) -> list[str]:
    """The saved first and last /metrics scrape of a run_benchmark run (its capture.json beside them), found
    the way every run id is found (the results directory, held to the file roots)."""
    from vllm_tune.tools.bench.store import ResultStore, results_dir
    from vllm_tune.tools.diagnose.capture import AFTER, BEFORE, META

    folder = ResultStore(results_dir(results)).find_run(run_id)
    files = [folder / BEFORE, folder / AFTER]
    if not all(f.is_file() for f in (*files, folder / META)):
        raise BadInputError(f"benchmark run {run_id} has no saved /metrics scrapes (runs with scrape_metrics off, "
                            "capacity searches, runs with fewer than two scrapes and runs saved by older "
                            "versions keep none)")
    return [str(f) for f in files]


def diagnose_texts(texts: list[tuple[str, str]], *, window_s: float | None = None, log_text: str | None = None,
                   slo: SloTargets | None = None, serve_flags: ServeFlags | None = None,
                   model: str | None = None, slo_percentile: Literal[50, 90, 95, 99] = 90,
                   captured_window_s: float | None = None) -> DiagnoseOutput:
    """Offline convenience: diagnose saved scrapes (no network)."""
    request = DiagnoseInput(metrics=[MetricsText(name=n, text=t) for n, t in texts], window_s=window_s,
                            log_text=log_text, slo=slo or SloTargets(), serve_flags=serve_flags or ServeFlags(),
                            model=model, slo_percentile=slo_percentile, captured_window_s=captured_window_s)
    got = _Collected()
    if log_text is not None:
        got.log = parse_log(log_text)
    got.window = window_from_texts(texts, window_s, captured_window_s)
    got.sources = [f"metrics text: {n}" for n, _ in texts]
    return analyse(got, request)


__all__ = ["DiagnoseInput", "DiagnoseOutput", "MetricsText", "ServeFlags", "SloTargets", "diagnose_metrics",
           "diagnose_texts"]
