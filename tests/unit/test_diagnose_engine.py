"""Triage rules from the knowledge base: evaluation, abstention and ranking."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_tune.tools.diagnose.engine import evaluate
from vllm_tune.tools.diagnose.models import Finding
from vllm_tune.tools.diagnose.signals import PROBLEM_WHEN, SIGNAL_DOCS, SignalSet
from vllm_tune.tools.kb import KnowledgeBase, load_from, load_knowledge

STABLE_IDS = {"triage.ttft-high-queue-empty", "triage.ttft-high-queue-growing", "triage.tpot-high-decode-bound",
              "triage.itl-spikes-graph-miss", "triage.preemption-kv-thrash", "triage.running-below-limit-stall"}

RULES = """
entries:
  - id: triage.sym
    kind: triage
    title: A symptom rule
    statement: A symptom that a root cause can explain, for tests only.
    signals:
      - {signal: waiting_mean, op: ">", threshold: 1, why: requests wait}
      - {signal: running_mean, op: ">=", threshold: 0, why: running is known}
    severity: critical
    confidence: high
    actions: [{kind: operational, target: x, direction: check, expected_effect: y}]
    evidence: attributed-claim
    sources: [{kind: capture, ref: tests}]
    last_verified: {date: 2026-12-03, vllm: "0.32.0"}
  - id: triage.root
    kind: triage
    title: A root-cause rule
    statement: A root cause that explains the symptom, for tests only.
    signals:
      - {signal: preemptions_per_s, op: ">=", threshold: 0.05, why: preemptions}
      - {signal: preemptions_per_request, op: ">=", threshold: 0.05, why: preemptions per request}
    match: any
    severity: critical
    confidence: medium
    actions: [{kind: flag, target: --max-num-seqs, direction: lower, expected_effect: y}]
    evidence: vendor-doc
    sources: [{kind: doc, ref: docs}]
    last_verified: {date: 2026-12-03, vllm: "0.32.0"}
    tags: [root-cause]
  - id: triage.old
    kind: triage
    title: Only for old servers
    statement: A rule that applies to old versions only, for tests.
    applies_to: {vllm: {spec: "<0.10"}}
    signals: [{signal: waiting_mean, op: ">", threshold: 0, why: always}]
    severity: info
    confidence: low
    actions: [{kind: operational, target: x, direction: upgrade, expected_effect: y}]
    evidence: attributed-claim
    sources: [{kind: capture, ref: tests}]
    last_verified: {date: 2026-12-03, vllm: "0.32.0"}
  - id: triage.decode
    kind: triage
    title: Decode is slow while first tokens are on time
    statement: A decode-bound rule whose second condition is not a problem, for tests only.
    signals:
      - {signal: decode_over_target, op: ">", threshold: 1, why: decode over target}
      - {signal: ttft_over_target, op: "<=", threshold: 1, why: TTFT on time}
    severity: warning
    confidence: medium
    actions: [{kind: operational, target: x, direction: check, expected_effect: y}]
    evidence: vendor-doc
    sources: [{kind: doc, ref: docs}]
    last_verified: {date: 2026-12-03, vllm: "0.32.0"}
  - id: triage.cap
    kind: triage
    title: TTFT over target with a queue
    statement: A capacity rule with a bucketed latency condition, for tests only.
    signals:
      - {signal: ttft_over_target, op: ">", threshold: 1, why: TTFT over target}
      - {signal: waiting_mean, op: ">=", threshold: 1, why: requests wait}
    severity: critical
    confidence: high
    actions: [{kind: operational, target: x, direction: check, expected_effect: y}]
    evidence: vendor-doc
    sources: [{kind: doc, ref: docs}]
    last_verified: {date: 2026-12-03, vllm: "0.32.0"}
"""


@pytest.fixture
def kb(tmp_path: Path) -> KnowledgeBase:
    (tmp_path / "rules.yaml").write_text(RULES)
    return load_from(tmp_path)


def signals(bounded: dict[str, tuple[float, float | None]] | None = None, **values: float) -> SignalSet:
    s = SignalSet()
    for name, value in values.items():
        s.put(name, value, "test", bounds=(bounded or {}).get(name))
    return s


def ids(findings: list[Finding]) -> list[str]:
    return [f.id for f in findings]


def test_all_rule_fires_only_when_every_signal_holds(kb: KnowledgeBase) -> None:
    findings, _ = evaluate(kb, signals(waiting_mean=2, running_mean=0), version="0.32.0")
    assert ids(findings) == ["triage.sym"]
    assert [(e.signal, e.value, e.holds) for e in findings[0].evidence] == [("waiting_mean", 2.0, True),
                                                                          ("running_mean", 0.0, True)]
    assert findings[0].note is not None and "attributed claim" in findings[0].note
    assert evaluate(kb, signals(waiting_mean=0.5, running_mean=0), version="0.32.0")[0] == []


def test_missing_signal_abstains_only_when_a_present_signal_shows_a_problem(kb: KnowledgeBase) -> None:
    findings, abstained = evaluate(kb, signals(waiting_mean=2), version="0.32.0")
    assert findings == []
    assert [(a.id, a.missing_signals) for a in abstained] == [("triage.sym", ["running_mean"]),
                                                             ("triage.cap", ["ttft_over_target"])]
    # a present signal that contradicts the rule: not a candidate, no abstention
    assert evaluate(kb, signals(waiting_mean=0.1), version="0.32.0")[1] == []
    # what holds is no problem (running is known; TTFT is on time): nothing to report, as on a healthy server
    assert evaluate(kb, signals(running_mean=3, ttft_over_target=0.2), version="0.32.0") == ([], [])


def test_a_straddling_bucket_is_undecided_and_the_rule_rests_on_other_evidence(kb: KnowledgeBase) -> None:
    straddle = {"ttft_over_target": (0.5, 1.0)}  # the bucket's upper edge is the target itself
    findings, _ = evaluate(kb, signals(straddle, ttft_over_target=0.98, waiting_mean=5), version="0.32.0")
    cap = next(f for f in findings if f.id == "triage.cap")
    assert cap.confidence == "low" and cap.note is not None and "cannot be decided" in cap.note
    assert [e.holds for e in cap.evidence] == [None, True]
    # undecided and nothing else pointing to a problem: no finding, no abstention
    assert evaluate(kb, signals(straddle, ttft_over_target=0.98), version="0.32.0") == ([], [])
    # a bucket wholly above the threshold decides it
    above = {"ttft_over_target": (1.2, 2.0)}
    findings, _ = evaluate(kb, signals(above, ttft_over_target=1.5, waiting_mean=5), version="0.32.0")
    assert next(f for f in findings if f.id == "triage.cap").confidence == "high"
    # "on time" needs the whole bucket below the target
    assert evaluate(kb, signals({"ttft_over_target": (0.5, 1.0)}, ttft_over_target=0.9, decode_over_target=3),
                    version="0.32.0")[0][0].confidence == "low"
    assert evaluate(kb, signals({"ttft_over_target": (0.2, 0.5)}, ttft_over_target=0.4, decode_over_target=3),
                    version="0.32.0")[0][0].confidence == "medium"


def test_any_rule_and_root_cause_ranks_first(kb: KnowledgeBase) -> None:
    findings, _ = evaluate(kb, signals(waiting_mean=9, running_mean=1, preemptions_per_request=0.5),
                           version="0.32.0")
    assert ids(findings) == ["triage.root", "triage.sym"]
    root = findings[0]
    assert [e.signal for e in root.evidence] == ["preemptions_per_request"] and root.note is None
    assert root.actions[0].knowledge_ids[0] == "triage.root"


def test_version_range_and_confidence_cap(kb: KnowledgeBase) -> None:
    old, _ = evaluate(kb, signals(waiting_mean=2, running_mean=0), version="0.9.2")
    assert {f.id for f in old} == {"triage.sym", "triage.old"}
    capped, _ = evaluate(kb, signals(waiting_mean=2, running_mean=0), version="0.32.0", confidence_cap="medium")
    assert capped[0].confidence == "medium"


def test_bundled_rules_keep_stable_ids_and_only_known_signals() -> None:
    triage = [e for e in load_knowledge() if e.kind == "triage"]
    assert {e.id for e in triage} >= STABLE_IDS
    assert len(triage) >= 14
    unknown = {(e.id, s.signal) for e in triage for s in e.signals if s.signal not in SIGNAL_DOCS}
    assert unknown == set()
    # every signal a rule reads either says in which direction it means trouble, or is context by design
    context = {"running_mean", "running_over_max_num_seqs", "running_max_over_max_num_seqs", "server_utilisation",
               "finished_requests", "decode_share_of_e2el", "window_seconds", "prefix_hit_rate",
               "prefix_hit_rate_lifetime", "spec_decode_acceptance_rate"}
    assert {s.signal for e in triage for s in e.signals} - set(PROBLEM_WHEN) <= context
    thrash = load_knowledge().get("triage.preemption-kv-thrash")
    assert "--swap-space" not in {a.target for a in thrash.actions}


@pytest.mark.parametrize("lifetime, fires", [(0.60, True), (0.013, False)])
def test_a_prefix_cache_cliff_needs_a_cache_that_served_before(lifetime: float, fires: bool) -> None:
    # Seen on the suite's server: lifetime 1.3% (warm-up requests sharing a prompt), window 0%: a 100% "drop"
    # from a cache that never served anything is no cliff.
    kb = load_knowledge()
    signals = SignalSet()
    signals.put("prefix_hit_rate_drop", 1.0, "window 0.0% vs lifetime")
    signals.put("prefix_hit_rate_lifetime", lifetime, "lifetime")
    findings, _ = evaluate(kb, signals, version="0.32.0")
    assert ("triage.prefix-cache-hit-cliff" in {f.id for f in findings}) is fires
