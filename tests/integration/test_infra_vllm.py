"""The real components the suite relies on: vLLM /metrics, Prometheus scraping it, and each load state."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import load
from support.prometheus import PrometheusServer
from support.vllm_server import VllmFactory, VllmServer

pytestmark = pytest.mark.integration


def test_metrics_are_scraped_and_parsed(vllm_server: VllmServer) -> None:
    text = httpx.get(vllm_server.url + "/metrics", timeout=10).text
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "vllm:num_requests_running" in names
    assert "vllm:kv_cache_usage_perc" in names
    models = httpx.get(vllm_server.url + "/v1/models", timeout=10).json()
    assert models["data"][0]["id"] == vllm_server.model


def test_prometheus_collects_vllm_series(prometheus: PrometheusServer, vllm_server: VllmServer) -> None:
    series = prometheus.wait_for_series("vllm:num_requests_running")
    assert any(s["metric"].get("instance") == f"127.0.0.1:{vllm_server.port}" for s in series)


def test_idle_state(vllm_server: VllmServer) -> None:
    values = load.scrape(vllm_server.url)
    assert values["vllm:num_requests_running"] == 0
    assert values["vllm:num_requests_waiting"] == 0


def test_steady_light_load(vllm_server: VllmServer) -> None:
    before = load.scrape(vllm_server.url)
    result = load.drive_state(vllm_server.url, vllm_server.model, load.steady_light)
    after = load.scrape(vllm_server.url)
    assert result.completed == load.steady_light.requests, result.errors
    done = after["vllm:request_success_total"] - before["vllm:request_success_total"]
    assert done >= load.steady_light.requests
    generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    assert generated >= load.steady_light.requests * load.steady_light.max_tokens * 0.9


def test_overload_grows_the_queue(vllm_server_factory: VllmFactory) -> None:
    server = vllm_server_factory(list(load.overload.server_args))
    before = load.scrape(server.url)
    result, peaks = load.drive_and_watch(server.url, server.model, load.overload, ["vllm:num_requests_waiting"])
    after = load.scrape(server.url)
    assert result.completed == load.overload.requests, result.errors
    # 40 requests on 2 seats must wait, however slow the machine: the server's own queue-time total says so. The
    # waiting gauge is only sampled, and a starved poller can miss every moment it was above zero.
    queued_s = after["vllm:request_queue_time_seconds_sum"] - before.get("vllm:request_queue_time_seconds_sum", 0.0)
    assert queued_s > 1.0, (queued_s, peaks)


def test_kv_thrash_preempts(vllm_server_factory: VllmFactory) -> None:
    server = vllm_server_factory(list(load.kv_thrash.server_args))
    before = load.scrape(server.url)
    result = load.drive_state(server.url, server.model, load.kv_thrash)
    after = load.scrape(server.url)
    assert result.completed == load.kv_thrash.requests, result.errors
    assert after["vllm:num_preemptions_total"] > before.get("vllm:num_preemptions_total", 0.0)


def test_long_prompts_are_chunked(vllm_server_factory: VllmFactory) -> None:
    server = vllm_server_factory(list(load.long_prompts.server_args))
    before = load.scrape(server.url)
    result = load.drive_state(server.url, server.model, load.long_prompts)
    after = load.scrape(server.url)
    assert result.completed == load.long_prompts.requests, result.errors
    text = httpx.get(server.url + "/metrics", timeout=10).text
    buckets: dict[str, float] = {}
    count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:iteration_tokens_total":
            for s in family.samples:
                if s.name.endswith("_bucket"):
                    buckets[s.labels["le"]] = buckets.get(s.labels["le"], 0.0) + s.value
                elif s.name.endswith("_count"):
                    count += s.value
    budget = load.LONG_PROMPT_BATCH_TOKENS
    computed = after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]
    # Every prompt is far longer than the step budget, yet all finished: the scheduler split them.
    assert computed >= load.long_prompts.requests * load.long_prompts.prompt_tokens * 0.5
    assert load.long_prompts.prompt_tokens > 10 * budget
    assert count >= load.long_prompts.requests
    assert f"Chunked prefill is enabled with max_num_batched_tokens={budget}" in server.log_text()
    # vLLM adds a request's whole prompt length to the step in which its first token appears, so this
    # histogram does not bound per-step work by the budget; it does show those long first steps.
    within = max((v for le, v in buckets.items() if le != "+Inf" and float(le) <= budget), default=0.0)
    assert count - within >= 1
