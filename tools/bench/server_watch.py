"""Scrape the server's /metrics every second during a run and summarise the same window.

The client sees latency; the server says why (queueing, KV pressure, preemptions). Scrapes run on
the load process's event loop, so parsing is kept to a cheap pass over the few series we need: a full
exposition parse with prometheus_client, collecting the same sums, took 15-17x as long (bench/bench_scrape_parse.py:
7.7 against 0.46 ms a scrape at one engine, 387 against 26 ms at 64), time taken from the send schedule. diagnose,
which runs once and off any schedule, parses with prometheus_client. Counter and histogram deltas between the first and
last scrape give server-side TTFT, queue time and preemptions over exactly the measured window.
Metric names follow vllm-facts.md §5.1, including the pre-0.12 KV gauge name.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

_LE = re.compile(r'le="([^"]+)"')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
           "vllm:kv_cache_usage_perc": "kv", "vllm:gpu_cache_usage_perc": "kv"}
# iteration_tokens_total is a histogram; only its count (engine steps) is read, by what_if's passive calibration.
_COUNTERS = ("vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
             "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:request_success_total",
             "vllm:iteration_tokens_total_count")
_HISTS = ("vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds", "vllm:e2e_request_latency_seconds",
          "vllm:inter_token_latency_seconds", "vllm:request_prefill_time_seconds")


@dataclass
class Scrape:
    t: float
    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)


def parse_scrape(text: str, t: float) -> Scrape:
    """Sum the series we need over all label sets (engines, models); buckets are kept per `le`."""
    out = Scrape(t)
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        head, _, value_text = line.rpartition(" ")
        name = head.split("{", 1)[0]
        try:
            value = float(value_text)
        except ValueError:
            continue
        if name in _GAUGES:
            key = _GAUGES[name]
            out.gauges[key] = out.gauges.get(key, 0.0) + value
        elif name in _COUNTERS or (name.endswith(("_sum", "_count")) and name.rsplit("_", 1)[0] in _HISTS):
            out.counters[name] = out.counters.get(name, 0.0) + value
        elif name.endswith("_bucket") and name[:-7] in _HISTS:
            m = _LE.search(head)
            if m:
                le = math.inf if m.group(1) == "+Inf" else float(m.group(1))
                per = out.buckets.setdefault(name[:-7], {})
                per[le] = per.get(le, 0.0) + value
    return out


def cache_config_labels(text: str) -> dict[str, str]:
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return {k: v for k, v in _LABEL.findall(line.split("}", 1)[0]) if k not in ("engine", "model_name")}
    return {}


def bucket_quantile(buckets: dict[float, float], q: float) -> float | None:
    """Prometheus-style quantile estimate from cumulative bucket counts (linear within a bucket)."""
    edges = sorted(buckets)
    if not edges:
        return None
    total = buckets[edges[-1]]
    if total <= 0:
        return None
    rank = q * total
    prev_edge, prev_count = 0.0, 0.0
    for edge in edges:
        count = buckets[edge]
        if count >= rank:
            if math.isinf(edge):
                return prev_edge
            if count == prev_count:
                return edge
            return prev_edge + (edge - prev_edge) * (rank - prev_count) / (count - prev_count)
        prev_edge, prev_count = edge, count
    return prev_edge


class ServerSample(BaseModel):
    t_s: float = Field(description="seconds since the measured run started")
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = Field(default=None, description="fraction 0-1")


class ServerWindow(BaseModel):
    """What the server itself reported over the measured window."""

    scrapes: int = 0
    scrape_errors: int = 0
    samples: list[ServerSample] = Field(default_factory=list)
    max_running: float | None = None
    mean_running: float | None = None
    max_waiting: float | None = None
    mean_waiting: float | None = None
    max_kv_cache_usage: float | None = None
    mean_kv_cache_usage: float | None = None
    preemptions: float | None = None
    requests_finished: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    prefix_cache_hit_rate: float | None = None
    server_mean_ttft_ms: float | None = None
    server_p50_ttft_ms: float | None = Field(default=None, description="estimated from histogram buckets")
    server_p99_ttft_ms: float | None = Field(default=None, description="estimated from histogram buckets")
    server_mean_queue_time_ms: float | None = None
    server_p99_queue_time_ms: float | None = None
    server_mean_prefill_time_ms: float | None = Field(
        default=None, description="first scheduled to first token; TTFT minus queue and prefill is the time outside "
                                  "the scheduler (API server intake, the running step, the first token's way out)")
    server_mean_e2e_ms: float | None = None
    server_mean_itl_ms: float | None = None
    client_minus_server_mean_ttft_ms: float | None = Field(
        default=None, description="client mean TTFT minus server mean TTFT: network + HTTP + client overhead")
    cache_config: dict[str, str] = Field(default_factory=dict)
    diagnosis: dict[str, Any] | None = Field(default=None, description="diagnose_metrics findings for the window")
    notes: list[str] = Field(default_factory=list)


class ServerWatch:
    """Background scraper; start() before the load, stop() after, then summary()."""

    def __init__(self, client: httpx.AsyncClient, interval_s: float = 1.0) -> None:
        self.client = client
        self.interval_s = interval_s
        self.scrapes: list[Scrape] = []
        self.errors = 0
        self.first_text = ""
        self.last_text = ""
        self.first_unix = 0.0
        self.last_unix = 0.0
        self._task: asyncio.Task[None] | None = None
        self._t0 = time.perf_counter()

    async def _scrape(self) -> None:
        sent = time.time()
        try:
            response = await self.client.get("/metrics")
            if response.status_code != 200:
                self.errors += 1
                return
            text = response.text
        except httpx.HTTPError:
            self.errors += 1
            return
        stamp = (sent + time.time()) / 2  # as `vllm-tune capture` dates a scrape: the request's midpoint
        if not self.first_text:
            self.first_text, self.first_unix = text, stamp
        self.last_text, self.last_unix = text, stamp
        self.scrapes.append(parse_scrape(text, time.perf_counter()))

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._scrape()

    async def start(self) -> None:
        self._t0 = time.perf_counter()
        await self._scrape()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._scrape()

    def summary(self, client_mean_ttft_ms: float | None, run_start: float) -> ServerWindow:
        w = ServerWindow(scrapes=len(self.scrapes), scrape_errors=self.errors)
        if not self.scrapes:
            w.notes.append("no /metrics scrape succeeded; server-side numbers unavailable")
            return w
        w.cache_config = cache_config_labels(self.first_text)
        for s in self.scrapes:
            w.samples.append(ServerSample(t_s=round(s.t - run_start, 3), running=s.gauges.get("running"),
                                          waiting=s.gauges.get("waiting"), kv_cache_usage=s.gauges.get("kv")))

        def series(key: str) -> list[float]:
            return [s.gauges[key] for s in self.scrapes if key in s.gauges]

        for key, attr in (("running", "running"), ("waiting", "waiting"), ("kv", "kv_cache_usage")):
            values = series(key)
            if values:
                setattr(w, f"max_{attr}", max(values))
                setattr(w, f"mean_{attr}", sum(values) / len(values))
        first, last = self.scrapes[0], self.scrapes[-1]

        def delta(name: str) -> float | None:
            if name in first.counters and name in last.counters:
                return max(0.0, last.counters[name] - first.counters[name])
            return None

        w.preemptions = delta("vllm:num_preemptions_total")
        w.requests_finished = delta("vllm:request_success_total")
        w.prompt_tokens = delta("vllm:prompt_tokens_total")
        w.generation_tokens = delta("vllm:generation_tokens_total")
        queries, hits = delta("vllm:prefix_cache_queries_total"), delta("vllm:prefix_cache_hits_total")
        if queries and hits is not None:
            w.prefix_cache_hit_rate = hits / queries

        def mean_ms(hist: str) -> float | None:
            s, c = delta(hist + "_sum"), delta(hist + "_count")
            return s / c * 1000.0 if s is not None and c else None

        def quant_ms(hist: str, q: float) -> float | None:
            a, b = first.buckets.get(hist), last.buckets.get(hist)
            if not b:
                return None
            window = {le: b[le] - (a or {}).get(le, 0.0) for le in b}
            v = bucket_quantile(window, q)
            return v * 1000.0 if v is not None else None

        w.server_mean_ttft_ms = mean_ms("vllm:time_to_first_token_seconds")
        w.server_p50_ttft_ms = quant_ms("vllm:time_to_first_token_seconds", 0.5)
        w.server_p99_ttft_ms = quant_ms("vllm:time_to_first_token_seconds", 0.99)
        w.server_mean_queue_time_ms = mean_ms("vllm:request_queue_time_seconds")
        w.server_p99_queue_time_ms = quant_ms("vllm:request_queue_time_seconds", 0.99)
        w.server_mean_prefill_time_ms = mean_ms("vllm:request_prefill_time_seconds")
        w.server_mean_e2e_ms = mean_ms("vllm:e2e_request_latency_seconds")
        w.server_mean_itl_ms = mean_ms("vllm:inter_token_latency_seconds")
        if client_mean_ttft_ms is not None and w.server_mean_ttft_ms is not None:
            w.client_minus_server_mean_ttft_ms = client_mean_ttft_ms - w.server_mean_ttft_ms
        if not any(s.gauges for s in self.scrapes):
            w.notes.append("/metrics answered but carries no vllm: series")
        return w


def save_window(watch: ServerWatch, folder: Path, url: str, *, max_bytes: int) -> str | None:
    """The first and last scrape of the window as `vllm-tune capture` saves a pair (before.prom, after.prom,
    capture.json), so `diagnose --run` reads the run's window later; a note when there is nothing to save.
    Each text already came through a fetch capped at `max_bytes`; the cap is checked again so a saved run
    never holds more than that per file."""
    from vllm_tune.tools.diagnose.capture import write_capture
    from vllm_tune.tools.errors import BadInputError

    if len(watch.scrapes) < 2:
        return "fewer than two /metrics scrapes: the window's scrapes were not saved"
    if max(len(watch.first_text.encode()), len(watch.last_text.encode())) > max_bytes:
        return f"a /metrics scrape is larger than {max_bytes} bytes: the window's scrapes were not saved"
    try:
        write_capture(folder, url, (watch.first_text, watch.first_unix), (watch.last_text, watch.last_unix),
                      written_by="vllm-tune bench")
    except BadInputError as exc:
        return f"the window's scrapes were not saved: {exc}"
    return None


def _known_flags(flags: dict[str, str]) -> dict[str, int | bool]:
    """The serve flags the caller recorded, as diagnose's ServeFlags fields (metrics do not export them)."""
    ints = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "tensor_parallel_size")
    out: dict[str, int | bool] = {}
    for key, value in flags.items():
        name = key.lstrip("-").replace("-", "_")
        if name in ints:
            with contextlib.suppress(ValueError):
                out[name] = int(value)
        elif name == "enforce_eager":
            out[name] = str(value).lower() in ("", "1", "true", "yes")
    return out


async def attach_diagnosis(window: ServerWindow, watch: ServerWatch, *, slo_ms: dict[str, float],
                           serve_flags: dict[str, str], slo_percentile: float = 90.0) -> None:
    """diagnose_metrics on the run's own window: the first and last scrape, the time between them, the run's SLO
    at its percentile (where buckets can judge one: p50, p90, p95, p99) and the flags the caller recorded.
    A failure is a note; it never costs the measured run."""
    from vllm_tune.tools.diagnose.api import DiagnoseInput, MetricsText, diagnose_metrics
    from vllm_tune.tools.diagnose.models import ServeFlags, SloTargets

    if len(watch.scrapes) < 2:
        window.notes.append("fewer than two /metrics scrapes: no diagnosis for the window")
        return
    # The run's SLO is judged where the run states it; without one, diagnose's default targets keep its p90.
    pct: Literal[50, 90, 95, 99] = 90
    if slo_ms and slo_percentile in (50, 90, 95, 99):
        pct = int(slo_percentile)  # type: ignore[assignment]  # one of the four, checked just above
    elif slo_ms:
        window.notes.append(f"the diagnosis judges the SLO at p90: histogram buckets support p50, p90, p95 or "
                            f"p99, not p{slo_percentile:g}")
    try:
        request = DiagnoseInput(
            metrics=[MetricsText(name="run start", text=watch.first_text),
                     MetricsText(name="run end", text=watch.last_text)],
            window_s=max(0.0, watch.scrapes[-1].t - watch.scrapes[0].t),
            slo=SloTargets.model_validate(slo_ms), slo_percentile=pct,
            serve_flags=ServeFlags(**_known_flags(serve_flags)))
        result = await diagnose_metrics(request)
        window.diagnosis = result.model_dump(mode="json")
    except Exception as exc:
        window.notes.append(f"diagnose_metrics failed on this window: {type(exc).__name__}: {exc}"[:300])
