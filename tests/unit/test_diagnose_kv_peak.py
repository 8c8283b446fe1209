"""kv_usage_max when preemptions happened between scrapes.

The failing window is a real one (CI, 2 cores: --num-gpu-blocks-override 10, 4 seats, 400-token prompts): 6
preemptions in a 20 s window while the usage gauge, scraped about once a second, never read more than 5 of 9
blocks. A preemption happens only when a running request's next blocks cannot be allocated, so the cache was
full for the running set at that moment; read as 56% the window also met "the KV cache has clear room"."""

from __future__ import annotations

from vllm_tune.tools.diagnose.logs import LogFacts, StatsLine
from vllm_tune.tools.diagnose.models import Capacity, Latency, ServeFlags, SloTargets, Workload
from vllm_tune.tools.diagnose.report import _kv_seen
from vllm_tune.tools.diagnose.signals import Inputs, SignalSet, _kv_signals, _log_only_signals


def kv_max(cap: Capacity) -> tuple[float | None, str]:
    x = Inputs(window=None, log=None, workload=Workload(), latency=Latency(), capacity=cap, hists={},
               flags=ServeFlags(), targets=SloTargets())
    s = SignalSet()
    _kv_signals(s, x)
    got = s.values.get("kv_usage_max")
    return (None, "") if got is None else (got.value, got.how)


def test_preemptions_mean_the_cache_filled_between_scrapes() -> None:
    value, how = kv_max(Capacity(kv_usage_max=5 / 9, kv_usage_mean=0.026, preemptions=6.0, gauge_samples=21))
    assert value == 1.0
    assert "6 preemption(s)" in how and "56%" in how


def test_without_preemptions_the_scraped_peak_stands() -> None:
    assert kv_max(Capacity(kv_usage_max=5 / 9, preemptions=0.0, gauge_samples=21))[0] == round(5 / 9, 6)
    assert kv_max(Capacity(kv_usage_max=5 / 9, gauge_samples=21))[0] == round(5 / 9, 6)  # counter not exported
    assert kv_max(Capacity(preemptions=3.0))[0] is None  # no gauge: no value made up from the counter alone


def test_log_stats_lines_follow_the_same_rule() -> None:
    lines = [StatsLine(time=None, engine="0", prompt_tps=0.0, generation_tps=40.0, running=2, waiting=w,
                       kv_usage=kv, preemptions=p) for w, kv, p in ((3, 0.4, 0), (4, 0.5, 2))]
    s = SignalSet()
    _log_only_signals(s, LogFacts(stats=lines))
    got = s.values["kv_usage_max"]
    assert got.value == 1.0 and "2 preemption(s)" in got.how


def test_the_report_says_the_scraped_peak_is_not_the_peak() -> None:
    seen = _kv_seen(Capacity(kv_usage_max=5 / 9, preemptions=6.0))
    assert seen == "55.6% in the scrapes (full between them: preemptions)"
    assert _kv_seen(Capacity(kv_usage_max=5 / 9, preemptions=0.0)) == "55.6%"
