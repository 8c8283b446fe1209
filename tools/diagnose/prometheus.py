"""Read vLLM metrics from a Prometheus server over a time range (instant and range queries).

The two ends of the range are read as raw samples of every vLLM series (an instant query returns the last
scraped value at or before the time), so the rest of the pipeline is the same as for a direct scrape: same
deltas, same quantiles, same findings. Gauges over the range come from a range query. The
`histogram_quantile(q, sum by (le) (rate(X_bucket[w])))` PromQL result is kept as a cross-check. Every
series keeps its Prometheus labels (instance, pod, job...), so replicas stay apart until summed (fleet view).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import anyio.to_thread
import httpx

from vllm_tune.tools.diagnose.parse import RawSample
from vllm_tune.tools.diagnose.snapshot import Snapshot, snapshot_from_samples
from vllm_tune.tools.diagnose.window import Window
from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.net.http import SecretRedactor, describe_http_error

_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR = re.compile(rf"^(?:{_MATCHER}(?:,{_MATCHER})*)?,?\s*$")
_NAMES = "vllm:.+|http_requests_total|process_start_time_seconds"
_GAUGES = "vllm:(num_requests_running|num_requests_waiting|num_requests_waiting_by_reason|kv_cache_usage_perc|" \
          "gpu_cache_usage_perc)"
MAX_POINTS = 600
CROSS_CHECK = {"ttft": "vllm:time_to_first_token_seconds_bucket", "itl": "vllm:inter_token_latency_seconds_bucket"}


def check_selector(selector: str | None) -> str:
    """A PromQL label-matcher list such as `pod="a",namespace=~"prod.*"` (validated, never free PromQL)."""
    text = (selector or "").strip().strip("{}").strip()
    if text and not _SELECTOR.match(text):
        raise BadInputError(f"bad label selector {selector!r}: expected matchers like pod=\"x\",namespace=~\"y.*\"")
    return text.rstrip(",").strip()


def _matchers(selector: str, model: str | None) -> str:
    parts = [p for p in (selector,) if p]
    if model:
        parts.append(f'model_name="{_escape(model)}"')
    return ",".join(parts)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _get(client: httpx.Client, base: str, path: str, params: dict[str, str]) -> Any:
    url = f"{base}{path}"
    try:
        response = client.get(url, params=params)
    except httpx.HTTPError as exc:
        raise TargetError(describe_http_error(base, exc)) from None
    if response.status_code in (401, 403):
        raise TargetError(f"{base} refused the query (HTTP {response.status_code}); check the bearer token")
    try:
        body = response.json()
    except (json.JSONDecodeError, ValueError):
        raise TargetError(f"{base} does not look like a Prometheus API (no JSON from {path})") from None
    if not isinstance(body, dict) or "status" not in body:
        raise TargetError(f"{base} does not look like a Prometheus API (unexpected answer from {path})")
    if body["status"] != "success":
        raise TargetError(SecretRedactor()(f"Prometheus query failed: {body.get('errorType', '')} "
                                           f"{body.get('error', '')}".strip()))
    return body.get("data", {})


def _instant(client: httpx.Client, base: str, query: str, at: float) -> list[dict[str, Any]]:
    data = _get(client, base, "/api/v1/query", {"query": query, "time": f"{at:.3f}"})
    result = data.get("result", []) if isinstance(data, dict) else []
    return result if isinstance(result, list) else []


def _to_samples(result: list[dict[str, Any]]) -> list[RawSample]:
    out: list[RawSample] = []
    for item in result:
        metric = dict(item.get("metric", {}))
        name = metric.pop("__name__", None)
        value = item.get("value")
        if not name or not isinstance(value, list) or len(value) != 2:
            continue
        try:
            out.append(RawSample(str(name), {str(k): str(v) for k, v in metric.items()}, float(value[1])))
        except (TypeError, ValueError):
            continue
    return out


def _snapshot_at(client: httpx.Client, base: str, matchers: str, at: float, label: str) -> Snapshot:
    sel = f'{{__name__=~"{_NAMES}"{"," + matchers if matchers else ""}}}'
    samples = _to_samples(_instant(client, base, sel, at))
    if not any(s.name.startswith("vllm:") for s in samples):
        raise TargetError(f"Prometheus at {base} has no vllm:* series{' for ' + matchers if matchers else ''} "
                          f"at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(at))}")
    return snapshot_from_samples(samples, label, timestamp=at)


def _sample_time(client: httpx.Client, base: str, matchers: str, at: float) -> float | None:
    """When the samples an instant query at `at` answers with were scraped (the newest replica's). Prometheus
    answers with each series' latest sample up to five minutes old, so while its scrapes fail (a busy server
    answering /metrics after the scrape timeout) the values are older than the query time says."""
    sel = f"vllm:num_requests_running{{{matchers}}}" if matchers else "vllm:num_requests_running"
    try:
        result = _instant(client, base, f"timestamp({sel})", at)
    except TargetError:
        return None
    times: list[float] = []
    for item in result:
        try:
            times.append(float(item["value"][1]))
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return max(times) if times else None


def _dated(client: httpx.Client, base: str, matchers: str, snap: Snapshot, at: float) -> float:
    """The snapshot re-dated to its samples' scrape time (the query time when Prometheus cannot say)."""
    scraped = _sample_time(client, base, matchers, at)
    if scraped is not None and scraped <= at:
        snap.timestamp = scraped
    return snap.timestamp if snap.timestamp is not None else at


def _gauge_samples(client: httpx.Client, base: str, matchers: str, start: float, end: float) -> list[Snapshot]:
    step = max(1.0, (end - start) / MAX_POINTS)
    sel = f'{{__name__=~"{_GAUGES}"{"," + matchers if matchers else ""}}}'
    data = _get(client, base, "/api/v1/query_range",
                {"query": sel, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    by_time: dict[float, list[RawSample]] = {}
    for item in data.get("result", []) if isinstance(data, dict) else []:
        metric = dict(item.get("metric", {}))
        name = metric.pop("__name__", None)
        for t, v in item.get("values", []):
            try:
                by_time.setdefault(float(t), []).append(RawSample(str(name), metric, float(v)))
            except (TypeError, ValueError):
                continue
    return [snapshot_from_samples(by_time[t], f"prometheus range @{t:.0f}", timestamp=t, require_vllm=False)
            for t in sorted(by_time)]


def _cross_check(client: httpx.Client, base: str, matchers: str, end: float, window_s: float) -> dict[str, float]:
    """PromQL's p90 over the window, evaluated at the end sample's scrape time with a range reaching back to the
    start sample's scrape: both samples are in the range however late or few the scrapes were (a range a
    scrape short of the start holds a single sample on a server too busy to answer most scrapes, and then
    rate() answers nothing). The extra millisecond keeps the start sample in Prometheus 3's left-open ranges."""
    out: dict[str, float] = {}
    rng = f"{max(1000, round(window_s * 1000.0)) + 1}ms"
    for key, bucket in CROSS_CHECK.items():
        sel = f"{bucket}{{{matchers}}}" if matchers else bucket
        query = f"histogram_quantile(0.9, sum by (le) (rate({sel}[{rng}])))"
        try:
            result = _instant(client, base, query, end)
        except TargetError:
            continue
        if result:
            try:
                value = float(result[0]["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if value == value and value not in (float("inf"), float("-inf")):
                out[key] = value * 1000.0
    return out


def read_prometheus(client: httpx.Client, base: str, *, selector: str | None, model: str | None, window_s: float,
                    end: float | None = None) -> tuple[Window, dict[str, float], list[str]]:
    """(window between end-window_s and end, PromQL p90 cross-checks in ms, queries used)."""
    # The model filter is applied later, like for a direct scrape (cache_config_info has no model_name label,
    # so a PromQL model matcher would drop it); only the PromQL cross-check filters by model itself.
    matchers = _matchers(check_selector(selector), None)
    stop = end if end is not None else time.time()
    start = stop - window_s
    after = _snapshot_at(client, base, matchers, stop, f"{base} @end")
    samples = _gauge_samples(client, base, matchers, start, stop)
    caveats: list[str] = []
    try:
        before = _snapshot_at(client, base, matchers, start, f"{base} @start")
    except TargetError:
        # Scraping began inside the range (a new replica, a fresh Prometheus): use the range from the first
        # sample on rather than refusing, and say the window is shorter than asked.
        first = next((s.timestamp for s in samples if s.timestamp is not None and start < s.timestamp < stop), None)
        if first is None:
            raise
        before = _snapshot_at(client, base, matchers, first, f"{base} @first sample")
        caveats.append(f"Prometheus has these series only since {time.strftime('%H:%M:%SZ', time.gmtime(first))}: "
                       f"the window is {stop - first:.0f} s instead of {window_s:g} s")
        start, window_s = first, stop - first
    # The counters' window is the time between the two ends' scrapes, not between the query times: the same
    # up to a scrape interval normally, seconds shorter when scrapes failed near an end.
    asked = window_s
    measured = _dated(client, base, matchers, after, stop) - _dated(client, base, matchers, before, start)
    if measured > 0:
        window_s = measured
        if abs(measured - asked) > max(2.0, 0.1 * asked):
            caveats.append(f"Prometheus's samples at the window's ends were scraped {measured:.1f} s apart, not "
                           f"{asked:g} s (scrapes failed or lagged near an end): rates use the {measured:.1f} s")
    cross = _cross_check(client, base, _matchers(check_selector(selector), model),
                         after.timestamp if after.timestamp is not None else stop, window_s)
    if not samples:
        caveats.append("Prometheus returned no gauge samples in the range; gauges are read at the ends")
    window = Window(after=after, before=before, seconds=window_s, samples=samples, caveats=caveats)
    used = [f"Prometheus {base}: instant queries at {start:.0f} and {stop:.0f} ({window_s:g} s), range query "
            f"of running/waiting/KV gauges" + (f", selector {{{matchers}}}" if matchers else "")]
    return window, cross, used


async def read_prometheus_async(client: httpx.Client, base: str, *, selector: str | None, model: str | None,
                                window_s: float, end: float | None = None,
                                ) -> tuple[Window, dict[str, float], list[str]]:
    return await anyio.to_thread.run_sync(
        lambda: read_prometheus(client, base, selector=selector, model=model, window_s=window_s, end=end))
