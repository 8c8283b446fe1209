"""Parsing real vLLM /metrics captures into snapshots: names across versions, engines, models, bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vllm_tune.tools.diagnose.snapshot import parse_snapshot
from vllm_tune.tools.diagnose.window import Window
from vllm_tune.tools.errors import BadInputError

DATA = Path(__file__).resolve().parents[1] / "data"
UNDER_LOAD = (DATA / "diagnose" / "metrics-under-load.prom").read_text()
PREEMPTED = (DATA / "diagnose" / "metrics-after-preemptions.prom").read_text()

# The renames vLLM made (docs/usage/metrics.md deprecation policy; vllm-facts.md §5.1): new -> old.
OLD_NAMES = {
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries": "vllm:gpu_prefix_cache_queries",
    "vllm:prefix_cache_hits": "vllm:gpu_prefix_cache_hits",
    "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds",
}


def to_old_format(text: str, keep_new: bool = False) -> str:
    """The same scrape as an old (0.9-0.11) server would export it: old names, optionally both old and new."""
    out: list[str] = []
    for line in text.splitlines():
        renamed = line
        for new, old in OLD_NAMES.items():
            renamed = re.sub(re.escape(new) + r"(?=[_{ ])", old, renamed)
        if keep_new and renamed != line:
            out.append(line)
        out.append(renamed)
    return "\n".join(out) + "\n"


def with_engines(text: str, engines: int) -> str:
    """Relabel every engine="0" sample as engine="0".."N-1" (data parallel), keeping families contiguous."""
    out: list[str] = []
    for line in text.splitlines():
        if 'engine="0"' in line and not line.startswith("#"):
            out.extend(line.replace('engine="0"', f'engine="{i}"') for i in range(engines))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def test_real_capture_parses_by_canonical_name() -> None:
    snap = parse_snapshot(PREEMPTED, "after-preemptions")
    assert snap.model_names() == ["tiny-llama"]
    assert len(snap.engines()) == 1
    ((_, preemptions),) = snap.counters["num_preemptions"].items()
    assert preemptions == 18.0
    assert snap.gauges["kv_cache_usage_perc"]
    ttft = next(iter(snap.histograms["time_to_first_token_seconds"].values()))
    assert ttft.bounds[-1] == float("inf") and ttft.bounds[0] == 0.001
    assert ttft.cumulative[-1] == ttft.count
    reasons = {dict(d)["finished_reason"] for (_, d) in snap.counters["request_success"]}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    cfg = next(iter(snap.cache_config.values()))
    assert cfg["block_size"] == "128" and cfg["enable_prefix_caching"] == "True"
    assert not snap.legacy_names and not snap.v0_names
    assert snap.has_process_metrics and snap.process_start_time is not None


def test_old_metric_names_map_to_current_ones() -> None:
    new = parse_snapshot(UNDER_LOAD, "new")
    old = parse_snapshot(to_old_format(UNDER_LOAD), "old")
    assert old.legacy_names == {"gpu_cache_usage_perc", "gpu_prefix_cache_queries", "gpu_prefix_cache_hits",
                                "time_per_output_token_seconds"}
    assert old.gauges["kv_cache_usage_perc"] == new.gauges["kv_cache_usage_perc"]
    assert old.counters["prefix_cache_queries"] == new.counters["prefix_cache_queries"]
    itl_new = Window(after=new).histogram("inter_token_latency_seconds")
    itl_old = Window(after=old).histogram("inter_token_latency_seconds")
    assert itl_new is not None and itl_old is not None
    assert (itl_old.count, itl_old.cumulative) == (itl_new.count, itl_new.cumulative)


def test_both_names_during_deprecation_are_not_double_counted() -> None:
    both = parse_snapshot(to_old_format(UNDER_LOAD, keep_new=True), "both")
    new = parse_snapshot(UNDER_LOAD, "new")
    assert Window(after=both).counter("prefix_cache_queries") == Window(after=new).counter("prefix_cache_queries")
    h_both = Window(after=both).histogram("inter_token_latency_seconds")
    h_new = Window(after=new).histogram("inter_token_latency_seconds")
    assert h_both is not None and h_new is not None and h_both.count == h_new.count


def test_v0_only_names_and_explicit_total_counters() -> None:
    text = ("# TYPE vllm:num_requests_swapped gauge\n"
            'vllm:num_requests_swapped{model_name="m"} 0\n'
            "# TYPE vllm:num_preemptions_total counter\n"
            'vllm:num_preemptions_total{model_name="m"} 7\n')
    snap = parse_snapshot(text, "v0")
    assert snap.v0_names == {"num_requests_swapped"}
    assert Window(after=snap).counter("num_preemptions") == 7.0


def test_multi_engine_series_stay_apart_and_sum() -> None:
    one = parse_snapshot(PREEMPTED, "1")
    four = parse_snapshot(with_engines(PREEMPTED, 4), "4")
    assert [dict(e)["engine"] for e in four.engines()] == ["0", "1", "2", "3"]
    assert Window(after=four).counter("num_preemptions") == 4 * (Window(after=one).counter("num_preemptions") or 0)
    h1 = Window(after=one).histogram("e2e_request_latency_seconds")
    h4 = Window(after=four).histogram("e2e_request_latency_seconds")
    assert h1 is not None and h4 is not None
    assert h4.cumulative == [4 * c for c in h1.cumulative]
    assert len(four.cache_config) == 4


def test_several_models_select_one() -> None:
    other = PREEMPTED.replace('model_name="tiny-llama"', 'model_name="other"')
    body = "\n".join(line for line in other.splitlines() if not line.startswith("#"))
    snap = parse_snapshot(with_engines(PREEMPTED, 1) + body + "\n", "two models")
    assert snap.model_names() == ["other", "tiny-llama"]
    only = snap.select("other")
    assert only.model_names() == ["other"]
    assert Window(after=only).counter("num_preemptions") == 18.0


def test_multiprocess_pid_labels_are_folded() -> None:
    text = ("# TYPE vllm:num_preemptions counter\n"
            'vllm:num_preemptions_total{engine="0",model_name="m",pid="11"} 3\n'
            'vllm:num_preemptions_total{engine="0",model_name="m",pid="12"} 4\n'
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m",pid="11"} 2\n'
            'vllm:num_requests_running{engine="0",model_name="m",pid="12"} 5\n')
    snap = parse_snapshot(text, "mp")
    assert snap.multiprocess
    assert Window(after=snap).counter("num_preemptions") == 7.0
    assert list(snap.gauges["num_requests_running"].values()) == [5.0]


@pytest.mark.parametrize("text, fragment", [
    ("<html><body>404</body></html>", "not Prometheus text format"),
    ('{"detail": "Not Found"}', "not Prometheus text format"),
    ("hello world this is not metrics", "not valid Prometheus text format"),
    ("# TYPE foo counter\nfoo_total 1\n", "no vllm:* series"),
    ("", "no vllm:* series"),
    # Found by the fuzz test: integers too large for a float, as a value and as a timestamp.
    ("vllm:num_requests_running " + "9" * 400 + "\n", "not valid Prometheus text format"),
    ("vllm:num_requests_running 1 " + "9" * 400 + "\n", "not valid Prometheus text format"),
])
def test_garbage_input_is_one_clear_error(text: str, fragment: str) -> None:
    with pytest.raises(BadInputError) as err:
        parse_snapshot(text, "input.prom")
    message = str(err.value)
    assert fragment in message and message.startswith("input.prom")
    assert "\n" not in message
