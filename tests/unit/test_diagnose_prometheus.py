"""The Prometheus reader against a scripted Prometheus HTTP API (the real server is covered in integration)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from vllm_tune.tools.diagnose.prometheus import read_prometheus
from vllm_tune.tools.errors import TargetError

FIRST_SCRAPE = 1_000.0  # Prometheus has the series from here on
END = 1_060.0


def _series(name: str, value: float, **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": name, "engine": "0", "model_name": "m", **labels}, "value": [0, str(value)]}


def _api(first_scrape: float, end_lag_s: float = 0.0, asked: list[tuple[str, float]] | None = None,
         ) -> httpx.MockTransport:
    """Scrapes every second from `first_scrape` on, except none in the last `end_lag_s` before END. The PromQL
    cross-check's queries and times go to `asked`; it answers 0.25 s."""
    def handle(request: httpx.Request) -> httpx.Response:
        params = request.url.params
        if request.url.path == "/api/v1/query_range":
            start, end = float(params["start"]), float(params["end"])
            t = max(start, first_scrape)
            values = []
            while t <= end:
                values.append([t, "1"])
                t += 10
            result = [{"metric": {"__name__": "vllm:num_requests_running", "engine": "0", "model_name": "m"},
                       "values": values}]
            return httpx.Response(200, json={"status": "success", "data": {"result": result}})
        query, at = params["query"], float(params.get("time", END))
        if query.startswith("histogram_quantile"):
            if asked is None:
                return httpx.Response(200, json={"status": "success", "data": {"result": []}})
            asked.append((query, at))
            return httpx.Response(200, json={"status": "success", "data": {"result": [{"metric": {},
                                                                                        "value": [at, "0.25"]}]}})
        if query.startswith("timestamp("):
            scraped = float(int(min(at, END - end_lag_s)))
            stamps = [_series("vllm:num_requests_running", scraped)] if scraped >= first_scrape else []
            return httpx.Response(200, json={"status": "success", "data": {"result": stamps}})
        if at < first_scrape:
            result: list[dict[str, Any]] = []
        else:
            done = 0.0 if at == first_scrape else 30.0
            result = [_series("vllm:num_requests_running", 1), _series("vllm:num_requests_waiting", 0),
                      _series("vllm:request_success_total", done, finished_reason="length")]
        return httpx.Response(200, content=json.dumps({"status": "success", "data": {"result": result}}))

    return httpx.MockTransport(handle)


def test_range_starting_before_the_first_scrape_is_shortened_and_said() -> None:
    client = httpx.Client(transport=_api(FIRST_SCRAPE))
    window, _, _ = read_prometheus(client, "http://prom", selector=None, model=None, window_s=300, end=END)
    assert window.seconds == pytest.approx(END - FIRST_SCRAPE)
    assert any("instead of 300 s" in c for c in window.caveats)


def test_no_series_anywhere_is_a_target_error() -> None:
    client = httpx.Client(transport=_api(first_scrape=10_000.0))
    with pytest.raises(TargetError, match="no vllm:\\* series"):
        read_prometheus(client, "http://prom", selector=None, model=None, window_s=300, end=END)


def test_counters_are_dated_by_their_scrape_not_by_the_query() -> None:
    # Scrapes failed for the last 12 s of a 40 s window (a busy server answering /metrics after the scrape
    # timeout): the end's counters are 12 s old, so their increase covers 28 s, and rates must use 28 s.
    client = httpx.Client(transport=_api(FIRST_SCRAPE, end_lag_s=12.0))
    window, _, _ = read_prometheus(client, "http://prom", selector=None, model=None, window_s=40, end=END)
    assert window.seconds == pytest.approx(28.0)
    assert window.after.timestamp == pytest.approx(END - 12.0)
    assert any("scraped 28.0 s apart, not 40 s" in c for c in window.caveats)
    # Scrapes on time: the ends are dated by their scrapes (here on the second), and nothing is said.
    fresh, _, _ = read_prometheus(httpx.Client(transport=_api(FIRST_SCRAPE)), "http://prom", selector=None,
                                  model=None, window_s=40, end=END)
    assert fresh.seconds == pytest.approx(40.0) and not fresh.caveats


def test_promql_cross_check_spans_the_scrapes_the_counters_came_from() -> None:
    # With the end's scrapes 12 s late, a range counted back from the query time would hold the start sample
    # only (rate() then answers nothing); the range must run from the start sample to the end sample.
    asked: list[tuple[str, float]] = []
    client = httpx.Client(transport=_api(FIRST_SCRAPE, end_lag_s=12.0, asked=asked))
    _, cross, _ = read_prometheus(client, "http://prom", selector=None, model="m", window_s=40, end=END)
    assert cross == {"ttft": 250.0, "itl": 250.0}
    assert [at for _, at in asked] == [END - 12.0, END - 12.0]
    assert all("[28001ms]" in q and 'model_name="m"' in q for q, _ in asked)
