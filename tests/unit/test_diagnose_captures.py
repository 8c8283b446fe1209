"""Diagnosis of the real per-state captures (two scrapes + the server log of a vLLM 0.32 CPU server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_tune.tools.diagnose.api import DiagnoseOutput, diagnose_texts
from vllm_tune.tools.diagnose.models import SloTargets
from vllm_tune.tools.diagnose.report import render_report

DATA = Path(__file__).resolve().parents[1] / "data"
CAPTURES = DATA / "captures"


def diagnose_state(state: str, slo: SloTargets | None = None, *, with_log: bool = True) -> DiagnoseOutput:
    meta = json.loads((CAPTURES / f"{state}.json").read_text())
    texts = [(f"{state}.{end}.prom", (CAPTURES / f"{state}.{end}.prom").read_text()) for end in ("before", "after")]
    log = (CAPTURES / f"{state}.log").read_text() if with_log else None
    return diagnose_texts(texts, window_s=meta["window_s"] or None, log_text=log, slo=slo)


def warnings(out: DiagnoseOutput) -> list[str]:
    return [f.id for f in out.findings if f.severity != "info"]


def test_idle_has_nothing_to_diagnose() -> None:
    out = diagnose_state("idle")
    assert warnings(out) == [] and out.bottleneck is None
    assert out.verdict.startswith("idle")
    assert out.workload.finished_requests == 0


def test_light_load_is_healthy_with_default_and_realistic_targets() -> None:
    for slo in (None, SloTargets(ttft_ms=500, itl_ms=100, tpot_ms=100)):
        out = diagnose_state("steady_light", slo)
        assert warnings(out) == [], out.findings
        assert out.verdict.startswith("healthy")
        assert all(r.status == "met" for r in out.slo.values())
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
    out = diagnose_state("long_prompts", SloTargets(ttft_ms=300))
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
