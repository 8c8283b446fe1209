"""Evaluate the knowledge base's rules against computed signals; rank, explain, or abstain.

A rule (an Entry of kind `triage`, or a `pitfall` that carries signals) lists conditions on named signals and
`match: all|any`.
- all: every signal must be present and hold; if one is absent the rule abstains (never guesses), and the
  abstention is reported when the signals that are present all hold (so the caller knows what would decide it).
- any: fires if a present signal holds; abstains when none is present.
Ranking: severity, then rules tagged `root-cause` before symptoms (preemption thrash explains a growing queue,
and raising --max-num-seqs for the queue would make it worse), then confidence, then how far past its
thresholds the evidence is.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

from vllm_tune.tools.diagnose.models import Abstention, EvidenceItem, Finding, FindingAction
from vllm_tune.tools.diagnose.signals import SignalSet
from vllm_tune.tools.kb.loader import KnowledgeBase
from vllm_tune.tools.kb.schema import Confidence, Entry, Signal

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
}
_SEVERITY = {"info": 0, "warning": 1, "critical": 2}
_CONFIDENCE: list[Confidence] = ["low", "medium", "high"]
ROOT_CAUSE_TAG = "root-cause"

ActionAdvisor = Callable[[Entry, str, str], str | None]


@dataclass
class _Scored:
    finding: Finding
    severity: int
    root: bool
    confidence: int
    margin: float


def condition_holds(sig: Signal, value: float) -> bool:
    return _OPS[sig.op](value, sig.threshold)


def _margin(sig: Signal, value: float) -> float:
    """How far past the threshold a held condition is, relative to the threshold (for ordering only)."""
    scale = abs(sig.threshold) if sig.threshold else 1.0
    return min(10.0, abs(value - sig.threshold) / scale)


def _evidence(sig: Signal, signals: SignalSet) -> EvidenceItem | None:
    sv = signals.values.get(sig.signal)
    if sv is None:
        return None
    return EvidenceItem(signal=sig.signal, value=sv.value, threshold=sig.threshold, op=sig.op,
                        holds=_OPS[sig.op](sv.value, sig.threshold), unit=sig.unit, how=sv.how)


def _lever_ids(kb: KnowledgeBase, target: str) -> list[str]:
    return [e.id for e in kb if e.kind in ("lever", "flag", "env") and
            ((e.flag is not None and e.flag.name == target) or (e.env is not None and e.env.name == target))]


def _actions(entry: Entry, kb: KnowledgeBase, advise: ActionAdvisor | None) -> list[FindingAction]:
    out: list[FindingAction] = []
    for action in entry.actions:
        value = action.value
        if advise is not None:
            value = advise(entry, action.target, action.direction) or value
        out.append(FindingAction(kind=action.kind, target=action.target, direction=action.direction, value=value,
                                 expected_effect=action.expected_effect, risk=action.risk,
                                 knowledge_ids=[entry.id, *_lever_ids(kb, action.target)]))
    return out


def _sources(entry: Entry) -> list[str]:
    return [f"{s.kind}: {s.ref}" + (f" ({s.url})" if s.url else "") for s in entry.sources]


def _note(entry: Entry) -> str | None:
    if entry.evidence == "attributed-claim":
        return ("rests on an attributed claim: the rule comes from a third-party source and was not re-verified in "
                "vLLM's source; the measured evidence above is ours")
    return None


def evaluate(kb: KnowledgeBase, signals: SignalSet, *, version: str | None = None,
             advise: ActionAdvisor | None = None, confidence_cap: Confidence | None = None,
             kinds: tuple[str, ...] = ("triage",)) -> tuple[list[Finding], list[Abstention]]:
    """Fire the rules of the given kinds (triage rules on /metrics signals; pitfalls on configuration signals)."""
    scored: list[_Scored] = []
    abstained: list[Abstention] = []
    for entry in kb:
        if entry.kind not in kinds or not entry.signals:
            continue
        if version and not entry.applies_to.vllm.contains(version):
            continue
        items = [(sig, _evidence(sig, signals)) for sig in entry.signals]
        present = [(sig, ev) for sig, ev in items if ev is not None]
        missing = [sig.signal for sig, ev in items if ev is None]
        if entry.match == "all":
            if missing:
                if present and all(ev.holds for _, ev in present):
                    abstained.append(Abstention(
                        id=entry.id, missing_signals=missing,
                        reason=f"the signals that could be computed point this way, but {', '.join(missing)} "
                               "could not be computed from what was read"))
                continue
            fired = all(ev.holds for _, ev in present)
        else:
            if not present:
                continue
            fired = any(ev.holds for _, ev in present)
        if not fired:
            continue
        evidence = [ev for _, ev in present]
        held = [(sig, ev) for sig, ev in present if ev.holds]
        confidence: Confidence = entry.confidence or "low"
        if confidence_cap is not None and _CONFIDENCE.index(confidence) > _CONFIDENCE.index(confidence_cap):
            confidence = confidence_cap
        finding = Finding(id=entry.id, title=entry.title, severity=entry.severity or "info",
                          confidence=confidence,
                          statement=" ".join(entry.statement.split()), evidence=evidence,
                          actions=_actions(entry, kb, advise), sources=_sources(entry),
                          evidence_level=entry.evidence, note=_note(entry))
        margin = sum(_margin(sig, ev.value) for sig, ev in held) / max(1, len(held))
        scored.append(_Scored(finding, _SEVERITY[finding.severity], ROOT_CAUSE_TAG in entry.tags,
                              _CONFIDENCE.index(confidence), 0.0 if math.isnan(margin) else margin))
    scored.sort(key=lambda s: (-s.severity, not s.root, -s.confidence, -s.margin, s.finding.id))
    return [s.finding for s in scored], abstained
