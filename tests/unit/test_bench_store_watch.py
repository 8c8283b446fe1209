"""Result store (run ids, status) and the /metrics window summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_tune.tools.bench.server_watch import ServerWatch, bucket_quantile, cache_config_labels, parse_scrape
from vllm_tune.tools.bench.store import ResultStore, RunStatus, new_run_id
from vllm_tune.tools.errors import BadInputError

FIRST = """# HELP vllm:num_requests_running x
vllm:num_requests_running{engine="0",model_name="m"} 0.0
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 0.2
vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} 10.0
vllm:cache_config_info{block_size="128",engine="0",model_name="m",num_gpu_blocks="60"} 1.0
"""
LAST = """vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 5.0
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="m"} 30.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 30.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 4.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 30.0
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 1.0
vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} 30.0
"""


def test_window_summary_uses_deltas_and_sums_engines() -> None:
    watch = ServerWatch(client=None)  # type: ignore[arg-type]
    watch.first_text = FIRST
    watch.scrapes = [parse_scrape(FIRST, 100.0), parse_scrape(LAST, 101.0)]
    w = watch.summary(client_mean_ttft_ms=205.0, run_start=100.0)
    assert w.max_running == 6.0 and w.max_waiting == 5.0
    assert w.max_kv_cache_usage == 0.5  # old gauge name still understood
    assert w.preemptions == 4.0
    assert w.server_mean_ttft_ms == pytest.approx(4.0 / 20 * 1000)  # only the 20 requests in the window
    assert w.server_p50_ttft_ms is not None and 100.0 < w.server_p50_ttft_ms <= 250.0
    assert w.client_minus_server_mean_ttft_ms == pytest.approx(5.0)
    assert w.server_mean_prefill_time_ms == pytest.approx(0.8 / 20 * 1000)
    assert w.cache_config == {"block_size": "128", "num_gpu_blocks": "60"}


def test_no_scrapes_is_reported_not_raised() -> None:
    w = ServerWatch(client=None).summary(None, 0.0)  # type: ignore[arg-type]
    assert w.scrapes == 0 and w.notes


def test_bucket_quantile_interpolates() -> None:
    assert bucket_quantile({0.1: 0.0, 0.2: 10.0, float("inf"): 10.0}, 0.5) == pytest.approx(0.15)
    assert bucket_quantile({}, 0.5) is None
    assert cache_config_labels("nothing") == {}


def test_store_round_trip_and_run_id_guard(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    rid = new_run_id()
    store.write_status(RunStatus(run_id=rid, state="running"))
    assert store.read_status(rid).state == "running"
    store.write_result(rid, {"completed": 3})
    assert store.read_result(rid) == {"completed": 3}
    with pytest.raises(BadInputError):
        store.run_dir("../../etc/passwd")
    with pytest.raises(BadInputError, match="no benchmark run"):
        store.read_status(new_run_id())


def test_run_of_a_dead_process_is_lost(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    rid = new_run_id()
    store.write_status(RunStatus(run_id=rid, state="running", pid=2**22 + 12345))
    assert store.read_status(rid).state == "lost"
