"""Diagnosis of the real per-state captures (two scrapes + the server log of a vLLM 0.32 CPU server)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

import pytest

from vllm_tune.tools.diagnose.api import DiagnoseOutput, diagnose_texts
from vllm_tune.tools.diagnose.models import ServeFlags, SloTargets
from vllm_tune.tools.diagnose.report import render_report
from vllm_tune.tools.diagnose.snapshot import parse_snapshot
from vllm_tune.tools.diagnose.timing import capture_header

DATA = Path(__file__).resolve().parents[1] / "data"
CAPTURES = DATA / "captures"


def diagnose_state(state: str, slo: SloTargets | None = None, *, with_log: bool = True,
                   percentile: Literal[50, 90, 95, 99] = 90) -> DiagnoseOutput:
    meta = json.loads((CAPTURES / f"{state}.json").read_text())
    texts = [(f"{state}.{end}.prom", (CAPTURES / f"{state}.{end}.prom").read_text()) for end in ("before", "after")]
    log = (CAPTURES / f"{state}.log").read_text() if with_log else None
    return diagnose_texts(texts, window_s=meta["window_s"] or None, log_text=log, slo=slo, slo_percentile=percentile)


def warnings(out: DiagnoseOutput) -> list[str]:
    return [f.id for f in out.findings if f.severity != "info"]


def test_idle_has_nothing_to_diagnose() -> None:
    out = diagnose_state("idle")
    assert warnings(out) == [] and out.bottleneck is None
    assert out.verdict.startswith("idle")
    assert out.workload.finished_requests == 0


def test_light_load_is_healthy_with_default_and_realistic_targets() -> None:
    for slo in (None, SloTargets(ttft=500, itl=100, tpot=100)):
        out = diagnose_state("steady_light", slo)
        assert warnings(out) == [], out.findings
        assert out.verdict.startswith("healthy")
        assert all(r.status == "met" for r in out.slo.values())
        # a healthy server lists no abstentions: "TTFT is on time" alone points to no problem
        assert out.abstained == [], out.abstained
    assert out.workload.finished_requests == 12 and out.workload.output_tokens_mean == 32


def test_overload_is_capacity_bound() -> None:
    out = diagnose_state("overload")
    assert out.bottleneck == "triage.ttft-high-queue-growing"
    top = out.findings[0]
    evidence = {e.signal: e.value for e in top.evidence}
    assert evidence["queue_time_share_of_ttft"] > 0.9  # TTFT is almost all queueing
    assert evidence["waiting_mean"] > 5
    assert out.signals["running_over_max_num_seqs"].value > 0.9  # max_num_seqs 2 from the log, fully used
    assert out.capacity.max_num_seqs == 2 and out.capacity.max_num_seqs_source == "server log (non-default args)"
    bench = next(s for s in out.next_steps if s.tool == "run_benchmark")
    # The benchmark to reproduce it uses the observed lengths and concurrency (40 in flight, 128 output tokens).
    assert bench.arguments["output_len"] == 128 and 15 <= bench.arguments["input_len"] <= 25
    assert 15 <= bench.arguments["concurrency"] <= 40 and "url" not in bench.arguments


def test_kv_thrash_names_preemption_as_the_root_cause() -> None:
    out = diagnose_state("kv_thrash")
    assert out.bottleneck == "triage.preemption-kv-thrash"
    ids = [f.id for f in out.findings]
    assert ids.index("triage.preemption-kv-thrash") < ids.index("triage.ttft-high-queue-growing")
    assert "triage.kv-cache-too-small-for-max-num-seqs" in ids
    lower = next(a for a in out.findings[0].actions if a.target == "--max-num-seqs")
    assert lower.value is not None and lower.value.startswith("3 ")  # 1280 KV tokens / ~419 tokens per request
    assert any(s.tool == "recommend_parallelism" for s in out.next_steps)


def test_long_prompts_are_prefill_bound_against_a_cpu_realistic_ttft_target() -> None:
    # On this CPU server a 16-token request sees TTFT p90 near 50 ms (steady_light); 300 ms is a fair target.
    out = diagnose_state("long_prompts", SloTargets(ttft=300))
    assert out.bottleneck == "triage.ttft-high-queue-empty"
    assert out.slo["ttft"].status == "violated"
    assert out.signals["queue_time_share_of_ttft"].value < 0.5
    budget = next(a for a in out.findings[0].actions if a.target == "--max-num-batched-tokens")
    assert budget.value is not None and budget.value.startswith("2048 (now 16")
    # Without an SLO the same run passes the lenient default targets: the verdict depends on the target.
    assert diagnose_state("long_prompts").bottleneck is None


def test_lifetime_view_of_a_single_real_scrape() -> None:
    text = (DATA / "diagnose" / "metrics-after-preemptions.prom").read_text()
    out = diagnose_texts([("metrics-after-preemptions.prom", text)])
    assert out.view == "lifetime" and out.window_s is None
    assert out.bottleneck == "triage.preemption-kv-thrash"
    assert "preemptions_per_s" not in out.signals  # no window: no rates, never a guess
    assert "waiting_mean" not in out.signals  # one instant is not a time average
    assert any("lifetime" in c for c in out.caveats)
    assert out.workload.prefix_cache_hit_rate is not None and out.workload.prefix_cache_hit_rate > 0


def test_log_only_diagnosis_and_moe_warning() -> None:
    out = diagnose_texts([("after", (DATA / "diagnose" / "metrics-under-load.prom").read_text())],
                         log_text=(DATA / "diagnose" / "server-log-sample.txt").read_text())
    assert "triage.moe-default-config" in [f.id for f in out.findings]
    moe = next(s for s in out.next_steps if s.tool == "tune_moe")
    assert moe.arguments["num_experts"] == 8 and moe.arguments["shard_intermediate_size"] == 7168


def test_report_is_compact_and_cites_ids() -> None:
    text = render_report(diagnose_state("kv_thrash"))
    assert "Verdict: Preemptions are climbing" in text
    assert "triage.preemption-kv-thrash" in text and "--swap-space" not in text
    assert len(text.splitlines()) < 60


@pytest.mark.parametrize("state", ["overload", "kv_thrash"])
def test_old_metric_names_give_the_same_diagnosis(state: str) -> None:
    from test_diagnose_parse import to_old_format

    meta = json.loads((CAPTURES / f"{state}.json").read_text())
    texts = [(end, to_old_format((CAPTURES / f"{state}.{end}.prom").read_text())) for end in ("before", "after")]
    out = diagnose_texts(texts, window_s=meta["window_s"], log_text=(CAPTURES / f"{state}.log").read_text())
    assert out.bottleneck == diagnose_state(state).bottleneck
    assert "triage.old-metric-names" in [f.id for f in out.findings]


def _hand_delta(state: str, family: str, part: str) -> float:
    """_sum or _count of a histogram family, after minus before, read from the files by hand."""
    values = []
    for end in ("before", "after"):
        text = (CAPTURES / f"{state}.{end}.prom").read_text()
        values.append(sum(float(m.group(1)) for m in re.finditer(rf"^vllm:{family}{part}{{[^}}]*}} (\S+)$", text,
                                                                   re.MULTILINE)))
    return values[1] - values[0]


def test_a_percentile_in_the_first_bucket_is_a_bound_with_the_real_mean_beside_it() -> None:
    # steady_light: every queue time is under vLLM's first request_queue_time_seconds edge (0.3 s)
    out = diagnose_state("steady_light")
    queue = out.latency.queue
    assert queue is not None and queue.bucket_edges_ms[:3] == [300.0, 500.0, 800.0]
    for p in (queue.p50, queue.p90, queue.p99):
        assert p is not None and p.kind == "below_first_edge" and p.value_ms is None
        assert (p.lower_ms, p.upper_ms, p.text) == (0.0, 300.0, "< 300 ms")
    expected_mean = _hand_delta("steady_light", "request_queue_time_seconds", "_sum") / _hand_delta(
        "steady_light", "request_queue_time_seconds", "_count") * 1000
    assert queue.mean_ms == pytest.approx(expected_mean, abs=1e-6) and queue.mean_ms < 1.0
    line = next(x for x in render_report(out).splitlines() if x.strip().startswith("QUEUE"))
    assert "p50 < 300 / p90 < 300 / p99 < 300 ms, mean 0.0 ms (n=12)" in line
    assert "150" not in line and "270" not in line  # no invented interpolation inside the first bucket
    # every bucket-limited metric has its caveat, not only ITL/TPOT
    for label in ("queue time p90 lies in the first bucket", "TPOT p90 lies in the first bucket",
                  "prefill time p90 lies in the first bucket", "TTFT p90 lies in the 40-60 ms bucket"):
        assert any(c.startswith(label) and "from _sum/_count" in c for c in out.caveats), label
    # JSON consumers see the bound, not a number
    dumped = out.model_dump(mode="json")["latency"]["queue"]["p90"]
    assert dumped["value_ms"] is None and dumped["upper_ms"] == 300.0 and dumped["kind"] == "below_first_edge"


def _cap_buckets(text: str, family: str, top: float) -> str:
    """The same observations as a server whose buckets for `family` end at `top` would export them (finite
    edges above it dropped; the cumulative +Inf count already holds those observations)."""
    def keep(line: str) -> bool:
        m = re.match(rf'^vllm:{family}_bucket{{.*le="([^"]+)"', line)
        return m is None or m.group(1) == "+Inf" or float(m.group(1)) <= top
    return "\n".join(line for line in text.splitlines() if keep(line)) + "\n"


def test_a_percentile_in_the_inf_bucket_is_a_lower_bound() -> None:
    texts = [(end, _cap_buckets((CAPTURES / f"overload.{end}.prom").read_text(), "time_to_first_token_seconds",
                                5.0)) for end in ("before", "after")]
    out = diagnose_texts(texts, window_s=21.39, log_text=(CAPTURES / "overload.log").read_text(),
                         slo=SloTargets(ttft=3000))
    ttft = out.latency.ttft
    assert ttft is not None and ttft.p90 is not None and ttft.p50 is not None
    assert (ttft.p90.kind, ttft.p90.value_ms, ttft.p90.lower_ms, ttft.p90.upper_ms) == (
        "above_last_edge", None, 5000.0, None)
    assert ttft.p90.text == "> 5000 ms" and ttft.p50.kind == "above_last_edge"
    assert ttft.mean_ms == pytest.approx(9489.8, abs=0.1)  # the mean still comes from _sum/_count
    assert out.slo["ttft"].status == "violated"  # above 5 s is over a 3 s target, whatever the true value
    assert out.bottleneck == "triage.ttft-high-queue-growing"
    assert "p90 > 5000" in render_report(out)
    assert any("above the last finite bucket edge: only > 5000 ms" in c for c in out.caveats)


def test_an_itl_only_slo_reaches_the_decode_bound_rule() -> None:
    out = diagnose_state("steady_light", SloTargets(itl=5))  # ITL p90 lies in 10-25 ms: over 5 ms for sure
    assert out.bottleneck == "triage.tpot-high-decode-bound", out.verdict
    assert out.slo["itl"].status == "violated" and set(out.slo) == {"itl"}
    decided = out.findings[0].decided_by
    assert any(d.startswith("ITL p90") and "your SLO target 5 ms" in d for d in decided)
    assert any(d.startswith("TTFT p90") and "default target 3000 ms" in d for d in decided)
    assert out.targets_used["itl"] == "5 ms at p90 (your SLO)" and "default" in out.targets_used["ttft"]


def test_a_tpot_only_slo_is_judged_on_tpot() -> None:
    out = diagnose_state("long_prompts", SloTargets(tpot=8))  # TPOT p90 in the 10-25 ms bucket
    assert out.bottleneck == "triage.tpot-high-decode-bound", out.verdict
    assert out.slo["tpot"].status == "violated" and "TPOT p90" in out.verdict


def test_an_e2el_only_slo_names_where_the_time_goes() -> None:
    light = diagnose_state("steady_light", SloTargets(e2el=300))  # E2EL p90 in 300-500 ms, mostly decoding
    assert light.bottleneck == "triage.e2el-high-decode-dominated", light.verdict
    assert light.signals["decode_share_of_e2el"].value > 0.8
    assert light.slo["e2el"].status == "violated"
    heavy = diagnose_state("overload", SloTargets(e2el=5000))
    assert "triage.e2el-high-queue-dominated" in warnings(heavy)
    assert heavy.signals["queue_share_of_e2el"].value > 0.8


def test_the_slo_percentile_changes_the_verdict() -> None:
    # overload E2EL: p90 in 15-20 s, p99 in 20-30 s; kv_thrash TTFT: p95 in 10-20 s, p99 in 20-40 s
    slo = SloTargets(e2el=25000)
    assert diagnose_state("overload", slo).slo["e2el"].status == "met"
    p99 = diagnose_state("overload", slo, percentile=99).slo["e2el"]
    assert (p99.status, p99.percentile, p99.lower_ms, p99.upper_ms) == ("undecided", 99.0, 20000.0, 30000.0)
    assert diagnose_state("kv_thrash", SloTargets(ttft=20000), percentile=95).slo["ttft"].status == "undecided"
    out = diagnose_state("kv_thrash", SloTargets(ttft=20000), percentile=99)
    assert out.slo["ttft"].status == "violated" and out.slo_percentile == 99
    assert "judged at p99" in render_report(out)


def test_a_bucket_that_straddles_the_target_is_undecided_never_met() -> None:
    # steady_light E2EL p90 interpolates to 476 ms inside the 300-500 ms bucket; a 500 ms target is its edge
    out = diagnose_state("steady_light", SloTargets(e2el=500))
    assert out.slo["e2el"].status == "undecided"
    assert out.verdict.startswith("undecided") and "SLO met" not in out.verdict
    # overload TTFT p90 in the 10-20 s bucket against 15 s: undecided, and the verdict rests on the queue
    over = diagnose_state("overload", SloTargets(ttft=15000))
    assert over.slo["ttft"].status == "undecided"
    assert over.bottleneck == "triage.ttft-high-queue-growing"
    top = over.findings[0]
    assert top.confidence == "low" and top.note is not None and "rests on the other evidence" in top.note
    assert [e.holds for e in top.evidence if e.signal == "ttft_over_target"] == [None]
    assert "undecided" in over.verdict


def test_a_stated_window_that_contradicts_the_captures_is_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    from vllm_tune.cli.main import main
    from vllm_tune.knowledge import SAMPLES_DIR

    # The README flow: the bundled samples were recorded 21.39 s apart (their capture.json); --window 60 used
    # to read 0.71 running instead of 1.98 and add a false scheduler stall.
    sample = SAMPLES_DIR / "overload"
    assert main(["diagnose", "--metrics-file", str(sample / "before.prom"), "--metrics-file",
                 str(sample / "after.prom"), "--window", "60", "--max-num-seqs", "2", "--json"]) == 0
    out = DiagnoseOutput.model_validate_json(capsys.readouterr().out)
    assert out.window_s == 21.39
    assert any("stated window (60 s) contradicts" in c for c in out.caveats)
    assert "triage.running-below-limit-stall" not in [f.id for f in out.findings]
    assert out.workload.running_mean is not None and out.workload.running_mean > 1.9


def test_counters_say_when_a_window_is_too_short() -> None:
    texts = [(end, (CAPTURES / f"overload.{end}.prom").read_text()) for end in ("before", "after")]
    out = diagnose_texts(texts, window_s=5, serve_flags=ServeFlags(max_num_seqs=2))
    # idle at both scrapes: 42 s of running time at most 2 at once cannot fit into 5 s
    assert any("shorter than the counters allow" in c for c in out.caveats)
    assert any("shorter than the longest request" in c for c in out.caveats)
    assert not any("shorter than" in c for c in diagnose_state("overload").caveats)


def _dated(state: str, end: str, at: float) -> str:
    return capture_header(at, "http://127.0.0.1:8000") + (CAPTURES / f"{state}.{end}.prom").read_text()


def test_capture_headers_date_the_scrapes() -> None:
    start = parse_snapshot((CAPTURES / "steady_light.before.prom").read_text(), "x").process_start_time
    assert start is not None
    late = start + 3600
    texts = [(e, _dated("steady_light", e, late + (0.0 if e == "before" else 2.0))) for e in ("before", "after")]
    out = diagnose_texts(texts, window_s=30)
    assert out.window_s == pytest.approx(2.0)
    assert any("contradicts the scrapes' own timestamps" in c for c in out.caveats)
    assert out.warmup is None  # an hour after start is not warm-up


def test_warmup_is_said_instead_of_a_latency_bottleneck() -> None:
    # The same light load read as the first window of a server that started 20 s earlier (its lifetime request
    # count is 0 at the first scrape): a tight TTFT target is missed, but that is warm-up, not prefill-bound.
    start = parse_snapshot((CAPTURES / "steady_light.before.prom").read_text(), "x").process_start_time
    assert start is not None
    texts = [(e, _dated("steady_light", e, start + (20.0 if e == "before" else 22.03))) for e in ("before", "after")]
    out = diagnose_texts(texts, slo=SloTargets(ttft=20))
    assert out.warmup is not None and "started 20 s before the window" in out.warmup
    assert out.bottleneck is None and out.verdict.startswith("warming up")
    assert out.slo["ttft"].status == "violated"  # the numbers are still reported as they are
    # a queue and preemptions are not warm-up: the overload capture keeps its bottleneck
    start_o = parse_snapshot((CAPTURES / "overload.before.prom").read_text(), "x").process_start_time
    assert start_o is not None
    texts = [(e, _dated("overload", e, start_o + (20.0 if e == "before" else 41.39))) for e in ("before", "after")]
    over = diagnose_texts(texts, log_text=(CAPTURES / "overload.log").read_text())
    assert over.warmup is not None and over.bottleneck == "triage.ttft-high-queue-growing"



def test_a_busy_front_end_is_named_where_the_engine_neither_queues_nor_prefills_long() -> None:
    # 64 streams on an API server with one core, the engine on the other (frontend_bound.json "cores"): most of
    # TTFT passes before the scheduler queues a request, while its waiting gauge stays near zero.
    out = diagnose_state("frontend_bound", SloTargets(ttft=100))
    assert out.bottleneck == "triage.ttft-high-outside-engine", out.verdict
    top = out.findings[0]
    evidence = {e.signal: e.value for e in top.evidence}
    assert evidence["outside_engine_share_of_ttft"] > 0.6  # 1 - (5.1 + 11.9) / 62.2 ms
    assert evidence["queue_share_of_e2el"] < 0.02
    assert out.signals["waiting_mean"].value < 1  # so the capacity rule does not hold
    assert [a.target for a in top.actions][:2] == ["--api-server-count", "--stream-interval"]
    # Met targets name nothing, and the other states' time is in the engine: their own rules, or none, hold.
    assert diagnose_state("frontend_bound").bottleneck is None
    for state, slo in (("overload", None), ("long_prompts", SloTargets(ttft=100)), ("kv_thrash", SloTargets(ttft=100))):
        named = [f.id for f in diagnose_state(state, slo).findings]
        assert "triage.ttft-high-outside-engine" not in named, (state, named)
