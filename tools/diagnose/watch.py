"""Watch mode: re-diagnose a live server every interval over a sliding window of scrapes, read-only.

The loop scrapes /metrics every `sample_interval_s`, and every `interval_s` hands the scrapes of the last
`window_s` seconds to the same analysis a one-shot diagnosis runs (api.analyse), so a watch line says exactly
what `vllm-tune diagnose URL --window W` would have said at that moment. It only reads (GET /metrics); it never
sends load. The clock, the sleep and the scrape are parameters so tests can drive it with recorded scrapes.

Stopping: the loop ends at `duration_s`, or when the caller's Ctrl-C (KeyboardInterrupt) or a StopWatch raised
from a signal handler arrives; either way the summary of the whole watch is returned, including a diagnosis of
the whole watch (first to last scrape).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from vllm_tune.tools.diagnose import api
from vllm_tune.tools.diagnose.models import DiagnoseOutput, Percentiles, ServerInfo
from vllm_tune.tools.diagnose.snapshot import Snapshot, parse_snapshot
from vllm_tune.tools.diagnose.window import Window
from vllm_tune.tools.errors import BadInputError, TargetError, VllmTuneError
from vllm_tune.tools.net.http import fetch_text, http_client
from vllm_tune.tools.net.targets import TargetPolicy
from vllm_tune.tools.net.vllm_probe import probe_vllm

MAX_DURATION_S = 24 * 3600.0
DEFAULT_DURATION_S = 600.0
WINDOW_INTERVALS = 3  # default window: the last three intervals, so each verdict overlaps the previous two
MAX_WHOLE_SAMPLES = 240  # gauge samples kept for the whole-watch diagnosis (thinned evenly beyond this)

Scrape = Callable[[], Snapshot]
StopReason = Literal["duration", "interrupt", "signal"]


class StopWatch(KeyboardInterrupt):
    """Raised from a signal handler (SIGTERM) to end the watch early with a summary; outside the loop it reads
    as an interrupt."""


class WatchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interval_s: float = Field(ge=1, le=3600, description="seconds between diagnoses")
    duration_s: float = Field(default=DEFAULT_DURATION_S, gt=0, le=MAX_DURATION_S,
                              description="the watch ends after this many seconds (default 10 minutes, at most 24 h)")
    window_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S,
                                   description="sliding window each diagnosis reads (default 3 intervals)")
    sample_interval_s: float = Field(default=1.0, ge=0.2, le=3600, description="gauge sampling interval")

    @model_validator(mode="after")
    def _consistent(self) -> WatchSettings:
        if self.window_s is not None and self.window_s < self.interval_s:
            raise ValueError(f"the window ({self.window_s:g} s) must be at least the watch interval "
                             f"({self.interval_s:g} s)")
        if self.sample_interval_s > self.interval_s:
            raise ValueError(f"the sampling interval ({self.sample_interval_s:g} s) must not exceed the watch "
                             f"interval ({self.interval_s:g} s)")
        if self.duration_s < self.interval_s:
            raise ValueError(f"the duration ({self.duration_s:g} s) is shorter than one interval "
                             f"({self.interval_s:g} s)")
        return self

    @property
    def effective_window_s(self) -> float:
        return self.window_s if self.window_s is not None else WINDOW_INTERVALS * self.interval_s


class WatchTick(BaseModel):
    """One interval: what the diagnosis of the sliding window said, in compact form."""

    index: int
    elapsed_s: float = Field(description="seconds since the watch started")
    window_s: float | None
    verdict: str
    verdict_key: str = Field(description="what a change is judged on: the bottleneck id, else the verdict kind")
    bottleneck: str | None
    severity: str | None
    ttft_p90: str = Field(description="as diagnose states it: a value with its bucket, or a bound")
    itl_p90: str
    running_mean: float | None
    waiting_mean: float | None
    kv_usage_max_pct: float | None
    preemptions_per_s: float | None
    finished_requests: int | None
    changed: bool = Field(description="the verdict differs from the previous interval's")
    scrape_failures: int = Field(default=0, description="failed scrapes since the previous interval")


class VerdictSpan(BaseModel):
    verdict_key: str
    verdict: str
    start_s: float
    end_s: float
    intervals: int


class WatchSummary(BaseModel):
    url: str | None
    started_unix: float
    elapsed_s: float
    intervals: int
    stopped_by: StopReason
    verdict_changes: int
    timeline: list[VerdictSpan] = Field(default_factory=list)
    peak_running: float | None = None
    peak_waiting: float | None = None
    peak_kv_usage_pct: float | None = None
    preemptions: float | None = Field(default=None, description="increase over the whole watch")
    finished_requests: int | None = Field(default=None, description="over the whole watch")
    scrape_failures: int = 0
    whole: DiagnoseOutput | None = Field(default=None, description="diagnosis of the whole watch, first to last "
                                         "scrape")


def _p90_text(p: Percentiles | None) -> str:
    pct = p.p90 if p is not None else None
    return pct.text if pct is not None else "-"


def verdict_key(out: DiagnoseOutput) -> str:
    if out.bottleneck:
        return out.bottleneck
    return out.verdict.split(":", 1)[0].strip() or out.verdict


def _tick(index: int, elapsed: float, out: DiagnoseOutput, previous: str | None, failures: int) -> WatchTick:
    key = verdict_key(out)
    top = next((f for f in out.findings if f.id == out.bottleneck), None)
    kv = out.capacity.kv_usage_max
    return WatchTick(index=index, elapsed_s=round(elapsed, 3), window_s=out.window_s, verdict=out.verdict,
                     verdict_key=key, bottleneck=out.bottleneck, severity=top.severity if top else None,
                     ttft_p90=_p90_text(out.latency.ttft), itl_p90=_p90_text(out.latency.itl),
                     running_mean=out.workload.running_mean, waiting_mean=out.workload.waiting_mean,
                     kv_usage_max_pct=None if kv is None else round(kv * 100, 2),
                     preemptions_per_s=out.capacity.preemptions_per_s,
                     finished_requests=out.workload.finished_requests,
                     changed=previous is not None and key != previous, scrape_failures=failures)


def _window(snaps: list[Snapshot]) -> Window | None:
    """The scrapes of one window as diagnose's Window (the same shape collect.scrape_window builds)."""
    if len(snaps) < 2:
        return None
    first, last = snaps[0], snaps[-1]
    assert first.timestamp is not None and last.timestamp is not None
    return Window(after=last, before=first, seconds=last.timestamp - first.timestamp, samples=list(snaps))


def _analyse(snaps: list[Snapshot], request: api.DiagnoseInput, server: ServerInfo, what: str
             ) -> DiagnoseOutput | None:
    window = _window(snaps)
    if window is None:
        return None
    # The collection step of a one-shot diagnosis, done here from the watch's own scrapes.
    got = api._Collected()
    got.window = window
    got.server = server.model_copy(deep=True)
    got.sources = [f"{server.url or 'metrics'}/metrics scraped {len(snaps)} time(s) over "
                   f"{window.seconds or 0:.1f} s ({what})"]
    return api.analyse(got, request)


def _thin(samples: list[Snapshot]) -> list[Snapshot]:
    """Keep every other inner sample once the list is long; the ends (the window's counters) always stay."""
    if len(samples) <= MAX_WHOLE_SAMPLES:
        return samples
    return [samples[0], *samples[1:-1:2], samples[-1]]


class _Timeline:
    def __init__(self) -> None:
        self.spans: list[VerdictSpan] = []

    def add(self, tick: WatchTick, start_s: float) -> None:
        last = self.spans[-1] if self.spans else None
        if last is not None and last.verdict_key == tick.verdict_key:
            last.end_s, last.intervals, last.verdict = tick.elapsed_s, last.intervals + 1, tick.verdict
        else:
            self.spans.append(VerdictSpan(verdict_key=tick.verdict_key, verdict=tick.verdict, start_s=start_s,
                                          end_s=tick.elapsed_s, intervals=1))


def _peak(current: float | None, value: float | None) -> float | None:
    if value is None:
        return current
    return value if current is None else max(current, value)


def watch(request: api.DiagnoseInput, settings: WatchSettings, *, scrape: Scrape, server: ServerInfo,
          on_tick: Callable[[WatchTick, DiagnoseOutput], None], clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep, wall: Callable[[], float] = time.time) -> WatchSummary:
    """Run the watch; `scrape` returns one timestamped Snapshot (it raises VllmTuneError on failure).

    The first scrape must succeed (its error propagates: the target is wrong); later failures are counted and
    skipped. Returns when `settings.duration_s` has passed or on KeyboardInterrupt / StopWatch."""
    started_unix = wall()
    start = clock()
    first = scrape()
    window_s = settings.effective_window_s
    recent: deque[Snapshot] = deque([first])
    whole: list[Snapshot] = [first]
    timeline = _Timeline()
    ticks: list[WatchTick] = []
    failures = failures_since_tick = 0
    previous: str | None = None
    stopped_by: StopReason = "duration"
    peaks: dict[str, float | None] = {"running": None, "waiting": None, "kv": None}
    next_sample = start + settings.sample_interval_s
    next_tick = start + settings.interval_s
    end = start + settings.duration_s
    try:
        while True:
            now = clock()
            due = min(next_sample, next_tick, end)
            if now < due:
                sleep(due - now)
                continue
            if now >= next_sample or now >= next_tick or now >= end:
                try:
                    snap = scrape()
                    recent.append(snap)
                    whole.append(snap)
                    whole[:] = _thin(whole)
                except VllmTuneError:
                    failures += 1
                    failures_since_tick += 1
                while next_sample <= now:
                    next_sample += settings.sample_interval_s
            if now >= next_tick or now >= end:
                latest = recent[-1].timestamp or 0.0
                while len(recent) > 2 and (recent[1].timestamp or 0.0) <= latest - window_s + 1e-6:
                    recent.popleft()
                out = _analyse(list(recent), request, server, f"sliding window of {window_s:g} s")
                if out is not None:
                    tick = _tick(len(ticks) + 1, now - start, out, previous, failures_since_tick)
                    timeline.add(tick, ticks[-1].elapsed_s if ticks else 0.0)
                    ticks.append(tick)
                    previous = tick.verdict_key
                    failures_since_tick = 0
                    peaks["running"] = _peak(peaks["running"], out.capacity.running_max)
                    peaks["waiting"] = _peak(peaks["waiting"], out.capacity.waiting_max)
                    peaks["kv"] = _peak(peaks["kv"], out.capacity.kv_usage_max)
                    on_tick(tick, out)
                while next_tick <= now:
                    next_tick += settings.interval_s
            if now >= end:
                break
    except KeyboardInterrupt as exc:  # Ctrl-C, or StopWatch from the caller's signal handler
        stopped_by = "signal" if isinstance(exc, StopWatch) else "interrupt"
    whole_out = _analyse(whole, request, server, "the whole watch")
    kv = peaks["kv"]
    return WatchSummary(
        url=server.url, started_unix=started_unix, elapsed_s=round(clock() - start, 3), intervals=len(ticks),
        stopped_by=stopped_by, verdict_changes=sum(1 for t in ticks if t.changed), timeline=timeline.spans,
        peak_running=peaks["running"], peak_waiting=peaks["waiting"],
        peak_kv_usage_pct=None if kv is None else round(kv * 100, 2),
        preemptions=whole_out.capacity.preemptions if whole_out else None,
        finished_requests=whole_out.workload.finished_requests if whole_out else None,
        scrape_failures=failures, whole=whole_out)


def live_scraper(client: httpx.Client, base_url: str) -> Scrape:
    """GET /metrics once per call, stamped with the middle of the request (as collect.scrape_window does)."""
    url = f"{base_url}/metrics"

    def scrape() -> Snapshot:
        t0 = time.time()
        text = fetch_text(client, url, what="metrics")
        t1 = time.time()
        try:
            return parse_snapshot(text, url, timestamp=(t0 + t1) / 2)
        except BadInputError as exc:
            raise TargetError(f"{url} did not return vLLM metrics: {exc}") from None
    return scrape


def watch_live(request: api.DiagnoseInput, settings: WatchSettings, *, policy: TargetPolicy,
               on_tick: Callable[[WatchTick, DiagnoseOutput], None]) -> WatchSummary:
    """Watch `request.url`, which `policy` must allow (loopback, or listed in VLLM_TUNE_ALLOWED_TARGETS)."""
    if not request.url:
        raise BadInputError("watch mode needs a live server URL")
    if request.prometheus_url or request.metrics or request.log_text is not None:
        raise BadInputError("watch mode reads a live server only; drop --prometheus, --metrics-file and --log-file")
    base = policy.check(request.url)
    server = ServerInfo(url=base)
    with http_client(policy) as client:
        scrape = live_scraper(client, base)
        first = scrape()  # an unreachable or non-vLLM target fails here, before anything is printed
        try:
            info = probe_vllm(client, base)
            server.version, server.models = info.version, info.models
        except VllmTuneError:
            pass  # version-specific rules then all apply, as in a one-shot diagnosis
        pending = [first]

        def scrape_once() -> Snapshot:
            return pending.pop() if pending else scrape()
        return watch(request, settings, scrape=scrape_once, server=server, on_tick=on_tick)


# -- rendering ---------------------------------------------------------------------------------------------------
def _num(value: float | None, fmt: str) -> str:
    return "?" if value is None else format(value, fmt)


def render_tick(tick: WatchTick) -> str:
    """One compact line per interval."""
    what = f"{tick.severity} {tick.bottleneck}" if tick.bottleneck else tick.verdict_key
    failed = f" | {tick.scrape_failures} scrape(s) failed" if tick.scrape_failures else ""
    return (f"[+{tick.elapsed_s:6.1f}s] {what} | TTFT p90 {tick.ttft_p90} | ITL p90 {tick.itl_p90} | "
            f"running {_num(tick.running_mean, '.1f')} waiting {_num(tick.waiting_mean, '.1f')} | "
            f"KV {_num(tick.kv_usage_max_pct, '.1f')}% | preempt {_num(tick.preemptions_per_s, '.2f')}/s | "
            f"{tick.finished_requests if tick.finished_requests is not None else '?'} done{failed}")


def render_change(tick: WatchTick, previous: str | None) -> str:
    return f"== verdict changed at +{tick.elapsed_s:.1f} s: {previous or 'start'} -> {tick.verdict_key} =="


def render_summary(summary: WatchSummary) -> str:
    how = {"duration": "duration reached", "interrupt": "interrupted (Ctrl-C)", "signal": "stopped by a signal"}
    lines = [f"== watch summary: {summary.intervals} interval(s) over {summary.elapsed_s:.1f} s, "
             f"{how[summary.stopped_by]}, {summary.verdict_changes} verdict change(s), "
             f"{summary.scrape_failures} failed scrape(s) =="]
    for span in summary.timeline:
        lines.append(f"  +{span.start_s:.1f}-{span.end_s:.1f} s  {span.verdict_key} ({span.intervals} interval(s)): "
                     f"{span.verdict}")
    lines.append(f"  peaks seen at the scrapes: running {_num(summary.peak_running, 'g')}, waiting "
                 f"{_num(summary.peak_waiting, 'g')}, "
                 f"KV {_num(summary.peak_kv_usage_pct, '.1f')}%; over the whole watch: "
                 f"{summary.finished_requests if summary.finished_requests is not None else '?'} finished, "
                 f"{_num(summary.preemptions, 'g')} preemption(s)")
    return "\n".join(lines) + "\n"
