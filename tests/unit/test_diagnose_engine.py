"""Triage rules from the knowledge base: evaluation, abstention and ranking."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_tune.tools.diagnose.engine import evaluate
from vllm_tune.tools.diagnose.signals import SIGNAL_DOCS, SignalSet
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
      - {signal: a, op: ">", threshold: 1, why: a is high}
      - {signal: b, op: ">=", threshold: 0, why: b is known}
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
      - {signal: c, op: ">=", threshold: 0.05, why: c is high}
      - {signal: d, op: ">=", threshold: 0.05, why: d is high}
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
    signals: [{signal: a, op: ">", threshold: 0, why: always}]
    severity: info
    confidence: low
    actions: [{kind: operational, target: x, direction: upgrade, expected_effect: y}]
    evidence: attributed-claim
    sources: [{kind: capture, ref: tests}]
    last_verified: {date: 2026-12-03, vllm: "0.32.0"}
"""


@pytest.fixture
def kb(tmp_path: Path) -> KnowledgeBase:
    (tmp_path / "rules.yaml").write_text(RULES)
    return load_from(tmp_path)


def signals(**values: float) -> SignalSet:
    s = SignalSet()
    for name, value in values.items():
        s.put(name, value, "test")
    return s


def test_all_rule_fires_only_when_every_signal_holds(kb: KnowledgeBase) -> None:
    findings, _ = evaluate(kb, signals(a=2, b=0), version="0.32.0")
    assert [f.id for f in findings] == ["triage.sym"]
    assert [(e.signal, e.value, e.holds) for e in findings[0].evidence] == [("a", 2.0, True), ("b", 0.0, True)]
    assert findings[0].note is not None and "attributed claim" in findings[0].note
    assert evaluate(kb, signals(a=0.5, b=0), version="0.32.0")[0] == []


def test_missing_signal_abstains_and_says_which(kb: KnowledgeBase) -> None:
    findings, abstained = evaluate(kb, signals(a=2), version="0.32.0")
    assert findings == []
    assert [(a.id, a.missing_signals) for a in abstained] == [("triage.sym", ["b"])]
    # a present signal that contradicts the rule: not a candidate, no abstention
    assert evaluate(kb, signals(a=0.1), version="0.32.0")[1] == []


def test_any_rule_and_root_cause_ranks_first(kb: KnowledgeBase) -> None:
    findings, _ = evaluate(kb, signals(a=9, b=1, d=0.5), version="0.32.0")
    assert [f.id for f in findings] == ["triage.root", "triage.sym"]
    root = findings[0]
    assert [e.signal for e in root.evidence] == ["d"] and root.note is None
    assert root.actions[0].knowledge_ids[0] == "triage.root"


def test_version_range_and_confidence_cap(kb: KnowledgeBase) -> None:
    old, _ = evaluate(kb, signals(a=2, b=0), version="0.9.2")
    assert {f.id for f in old} == {"triage.sym", "triage.old"}
    capped, _ = evaluate(kb, signals(a=2, b=0), version="0.32.0", confidence_cap="medium")
    assert capped[0].confidence == "medium"


def test_bundled_rules_keep_stable_ids_and_only_known_signals() -> None:
    triage = [e for e in load_knowledge() if e.kind == "triage"]
    assert {e.id for e in triage} >= STABLE_IDS
    assert len(triage) >= 14
    unknown = {(e.id, s.signal) for e in triage for s in e.signals if s.signal not in SIGNAL_DOCS}
    assert unknown == set()
    thrash = load_knowledge().get("triage.preemption-kv-thrash")
    assert "--swap-space" not in {a.target for a in thrash.actions}
