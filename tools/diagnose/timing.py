"""What the captures themselves say about time: the window between two scrapes, and whether it is warm-up.

A stated window is a claim; the scrapes' own timestamps (written by `vllm-tune capture`, or exposition
timestamps) and the counters are evidence. Rates and Little's-law concurrency divide by the window, so a wrong
one invents findings (a 60 s window over a 21.4 s capture reads 0.71 running instead of 1.98, a "stall").
"""

from __future__ import annotations

import re

from vllm_tune.tools.diagnose.logs import LogFacts
from vllm_tune.tools.diagnose.snapshot import Snapshot
from vllm_tune.tools.diagnose.window import Window

CAPTURE_HEADER = "# vllm-tune capture:"
_HEADER = re.compile(r"^# vllm-tune capture:(?P<fields>.*)$", re.MULTILINE)
# Stated and measured windows may differ by scrape duration and rounding; beyond this they contradict.
WINDOW_TOLERANCE = 0.05
WINDOW_TOLERANCE_S = 0.5
# A server this young whose lifetime request count is still 0 when the window opens serves its first requests
# in the window: one-time costs (lazy initialisation, kernel compilation) land on them. Start-up alone takes
# tens of seconds on a loaded CPU box, hence the generous bound.
WARMUP_UPTIME_S = 300.0


def capture_header(scraped_at_unix: float, url: str) -> str:
    """The comment line `vllm-tune capture` puts first in a saved scrape (Prometheus parsers skip comments)."""
    return f"{CAPTURE_HEADER} scraped_at={scraped_at_unix:.3f} url={url}\n"


def header_timestamp(text: str) -> float | None:
    """scraped_at from a capture header in the first lines of a saved scrape, if there is one."""
    m = _HEADER.search(text[:4096])
    if m is None:
        return None
    for part in m["fields"].split():
        key, _, value = part.partition("=")
        if key == "scraped_at":
            try:
                return float(value)
            except ValueError:
                return None
    return None


def resolve_window(stated: float | None, measured: float | None, how: str) -> tuple[float | None, list[str]]:
    """The window to use and what to say: the measured one wins over a stated one that contradicts it."""
    if measured is None or measured <= 0:
        return stated, []
    if stated is None:
        return measured, []
    if abs(stated - measured) > max(WINDOW_TOLERANCE_S, WINDOW_TOLERANCE * measured):
        return measured, [f"the stated window ({stated:g} s) contradicts {how} ({measured:.2f} s apart); rates and "
                          f"concurrency use {measured:.2f} s"]
    return stated, []


def _idle(snap: Snapshot) -> bool | None:
    running = snap.gauges.get("num_requests_running")
    waiting = snap.gauges.get("num_requests_waiting")
    if running is None or waiting is None:
        return None
    return sum(running.values()) + sum(waiting.values()) == 0


def counter_contradictions(window: Window, max_num_seqs: int | None, engines: int) -> list[str]:
    """What the counters say against the window length. With the server idle at both scrapes every request
    that finished ran wholly inside the window, so the window is at least the longest request, and the time
    requests spent running cannot exceed max_num_seqs per engine over the window."""
    seconds = window.seconds
    if window.before is None or not seconds or seconds <= 0:
        return []
    out: list[str] = []
    inference = window.histogram("request_inference_time_seconds")
    if max_num_seqs and inference is not None and inference.count > 0 and _idle(window.before) \
            and _idle(window.after):
        floor = inference.sum / (max_num_seqs * max(1, engines))
        if floor > seconds * (1 + WINDOW_TOLERANCE):
            out.append(f"the window ({seconds:g} s) is shorter than the counters allow: requests ran "
                       f"{inference.sum:.1f} s in all with at most {max_num_seqs} at a time, so at least "
                       f"{floor:.1f} s passed; check --window")
    e2e = window.histogram("e2e_request_latency_seconds")
    if e2e is not None and e2e.total > 0 and _idle(window.before) and _idle(window.after):
        lowest_edge_of_longest = 0.0
        prev = 0.0
        for bound, cum, before in zip(e2e.bounds, e2e.cumulative, [0.0, *e2e.cumulative[:-1]], strict=True):
            if cum > before:
                lowest_edge_of_longest = prev
            prev = bound
        if lowest_edge_of_longest > seconds * (1 + WINDOW_TOLERANCE):
            out.append(f"the window ({seconds:g} s) is shorter than the longest request in it (over "
                       f"{lowest_edge_of_longest:g} s end to end, both scrapes idle); check --window")
    return out


def finished_before(window: Window) -> float | None:
    """Requests the server had finished, over its life, when the window began."""
    if window.before is None:
        return None
    series = window.before.counters.get("request_success")
    if series is None:
        return None
    return sum(series.values())


def warmup_reason(window: Window | None, log: LogFacts | None) -> str | None:
    """Why the window looks like the server's warm-up, or None. The evidence: the server process started
    moments before the window and had served nothing yet, or the log shows compilation / graph capture while
    serving. (A lifetime count of 0 alone is not enough: captures recorded on a fresh server under a steady load
    show real bottlenecks.)"""
    reasons: list[str] = []
    if window is not None and window.before is not None:
        uptime = uptime_at_start(window)
        served = window.counter("request_success") or 0.0
        if finished_before(window) == 0 and served > 0 and uptime is not None and uptime < WARMUP_UPTIME_S:
            reasons.append(f"the server process started {uptime:.0f} s before the window and had finished no "
                           "request yet: the window holds its first requests")
    if log is not None and log.compile_lines_while_serving:
        reasons.append(f"the log shows compilation while serving: {log.compile_lines_while_serving[0][:120]}")
    return "; ".join(reasons) or None


def uptime_at_start(window: Window) -> float | None:
    snap = window.before or window.after
    if snap.process_start_time and snap.timestamp and snap.timestamp >= snap.process_start_time:
        return snap.timestamp - snap.process_start_time
    return None
