"""Gather snapshots: scrape a live server over a window, or read saved metrics texts."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.to_thread
import httpx

from vllm_tune.tools.diagnose.snapshot import Snapshot, parse_snapshot
from vllm_tune.tools.diagnose.timing import header_timestamp, resolve_window
from vllm_tune.tools.diagnose.window import Window
from vllm_tune.tools.errors import BadInputError, TargetError, VllmTuneError
from vllm_tune.tools.net.http import fetch_text
from vllm_tune.tools.net.vllm_probe import VllmServerInfo, probe_vllm

Progress = Callable[[float, float, str], Awaitable[None]]


async def _scrape(client: httpx.Client, base_url: str) -> Snapshot:
    url = f"{base_url}/metrics"
    t0 = time.time()
    text = await anyio.to_thread.run_sync(lambda: fetch_text(client, url, what="metrics"))
    t1 = time.time()
    try:
        return parse_snapshot(text, url, timestamp=(t0 + t1) / 2)
    except BadInputError as exc:
        raise TargetError(f"{url} did not return vLLM metrics: {exc}") from None


async def probe(client: httpx.Client, base_url: str) -> VllmServerInfo:
    return await anyio.to_thread.run_sync(lambda: probe_vllm(client, base_url))


async def scrape_window(client: httpx.Client, base_url: str, window_s: float, interval_s: float,
                        progress: Progress | None = None) -> Window:
    """Scrape /metrics at the start, every `interval_s` and at the end of `window_s`.

    A failed scrape in the middle is skipped; if the last fails, the window ends at the last good one; with a
    single good scrape the view falls back to lifetime totals. Only a failed first scrape raises."""
    first = await _scrape(client, base_url)
    snaps = [first]
    caveats: list[str] = []
    if window_s <= 0:
        return Window(after=first, samples=snaps, caveats=["window 0: one scrape, lifetime view"])
    n = max(1, math.ceil(window_s / interval_s))
    start = time.monotonic()
    failures = 0
    for k in range(1, n + 1):
        due = start + min(window_s, k * interval_s)
        await anyio.sleep(max(0.0, due - time.monotonic()))
        try:
            snaps.append(await _scrape(client, base_url))
        except VllmTuneError as exc:
            failures += 1
            if failures == 1:
                caveats.append(f"a scrape during the window failed ({exc}); the window uses the scrapes that worked")
        if progress is not None:
            await progress(min(window_s, time.monotonic() - start), window_s,
                           f"scraped /metrics {len(snaps)} time(s) of {n + 1}")
    if len(snaps) == 1:
        caveats.append("only the first scrape succeeded: lifetime averages since the server started")
        return Window(after=first, samples=snaps, caveats=caveats)
    last = snaps[-1]
    assert first.timestamp is not None and last.timestamp is not None
    return Window(after=last, before=first, seconds=last.timestamp - first.timestamp, samples=snaps, caveats=caveats)


def window_from_texts(texts: list[tuple[str, str]], window_s: float | None,
                      captured_window_s: float | None = None) -> Window:
    """One text: lifetime view. Two texts (earlier first): the delta between them.

    The window comes from the scrapes' own timestamps (a capture header or exposition timestamps), else from
    `captured_window_s` (what the recorder measured), else from `window_s`; a stated window that contradicts
    the measured one is warned about and the measured one is used."""
    if not texts or len(texts) > 2:
        raise BadInputError("give one metrics text (lifetime view) or two (earlier first) for a window")
    snaps = [parse_snapshot(text, name) for name, text in texts]
    for snap, (_, text) in zip(snaps, texts, strict=True):
        stamp = header_timestamp(text)
        if stamp is not None and snap.timestamp is None:
            snap.timestamp = stamp
    if len(snaps) == 1:
        return Window(after=snaps[0], caveats=[
            f"one saved scrape ({texts[0][0]}): values are lifetime totals and averages since the server started, "
            "and gauges are a single instant; give two scrapes and --window for rates over a window"])
    before, after = snaps
    _check_order(before, after)
    measured, how = None, ""
    if before.timestamp is not None and after.timestamp is not None:
        measured, how = after.timestamp - before.timestamp, "the scrapes' own timestamps"
    elif captured_window_s is not None:
        measured, how = captured_window_s, "the window recorded with the captures"
    seconds, caveats = resolve_window(window_s, measured, how)
    if seconds is None:
        caveats.append("no window length known (pass --window SECONDS): per-request statistics only, no rates")
    elif seconds <= 0:
        raise BadInputError(f"the window between the two scrapes must be positive, got {seconds:g} s")
    return Window(after=after, before=before, seconds=seconds, samples=[before, after], caveats=caveats)


def _check_order(before: Snapshot, after: Snapshot) -> None:
    b, a = before.histograms.get("e2e_request_latency_seconds", {}), after.histograms.get(
        "e2e_request_latency_seconds", {})
    shared = set(a) & set(b)
    same_process = before.process_start_time is not None and before.process_start_time == after.process_start_time
    if shared and same_process and all(a[k].count < b[k].count for k in shared):
        raise BadInputError(f"{after.source} has lower request counts than {before.source} from the same server "
                            "process: pass the earlier scrape first")
