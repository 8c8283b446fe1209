"""Evaluate the knowledge base's rules against computed signals; rank, explain, or abstain.

A rule (an Entry of kind `triage`, or a `pitfall` that carries signals) lists conditions on named signals and
`match: all|any`.
- all: every signal must be present and hold; if one is absent the rule abstains (never guesses), and the
  abstention is reported when the signals that are present all hold and at least one of them indicates a
  problem (a healthy server's "TTFT is on time" alone is no reason to mention a rule).
- any: fires if a present signal holds; abstains when none is present.
A signal known only within bounds (a latency percentile inside a histogram bucket) holds, fails or is
undecided: undecided when the bounds straddle the threshold. An `all` rule with undecided conditions fires only
when the conditions that did hold include evidence of a problem, at low confidence and saying so (the verdict
then rests on that evidence, e.g. a sustained queue); otherwise it is reported as an abstention or not at all.
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
from vllm_tune.tools.diagnose.signals import SignalSet, indicates_problem
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


def _holds(sig: Signal, value: float, lower: float | None, upper: float | None, bounded: bool) -> bool | None:
    """True/False, or None when the value's bounds straddle the threshold. The lower bound is exclusive (a
    bucket holds values above its lower edge); the upper edge counts as reaching the threshold, so "below
    target" needs margin."""
    if not bounded or sig.op in ("==", "!="):
        return _OPS[sig.op](value, sig.threshold)
    lo = lower if lower is not None else -math.inf
    hi = upper if upper is not None else math.inf
    t = sig.threshold
    if sig.op in (">", ">="):
        return True if lo >= t else False if hi < t else None
    return True if hi < t else False if lo >= t else None


def _evidence(sig: Signal, signals: SignalSet) -> EvidenceItem | None:
    sv = signals.values.get(sig.signal)
    if sv is None:
        return None
    return EvidenceItem(signal=sig.signal, value=sv.value, threshold=sig.threshold, op=sig.op,
                        holds=_holds(sig, sv.value, sv.lower, sv.upper, sv.bounded), lower=sv.lower,
                        upper=sv.upper if sv.bounded else None, unit=sig.unit, how=sv.how)


def _problem_held(present: list[tuple[Signal, EvidenceItem]]) -> bool:
    return any(ev.holds is True and indicates_problem(sig.signal, sig.op) for sig, ev in present)


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


def _note(entry: Entry, undecided: list[str]) -> str | None:
    notes: list[str] = []
    if undecided:
        notes.append(f"{', '.join(undecided)} cannot be decided from the histogram buckets (the bucket holding the "
                     "percentile reaches the threshold); the finding rests on the other evidence")
    if entry.evidence == "attributed-claim":
        notes.append("rests on an attributed claim: the rule comes from a third-party source and was not "
                     "re-verified in vLLM's source; the measured evidence above is ours")
    return "; ".join(notes) or None


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
        undecided = [sig.signal for sig, ev in present if ev.holds is None]
        if entry.match == "all":
            if any(ev.holds is False for _, ev in present):
                continue
            if missing or (undecided and not _problem_held(present)):
                if _problem_held(present):
                    unknown = missing + undecided
                    abstained.append(Abstention(
                        id=entry.id, missing_signals=unknown,
                        reason=f"the signals that could be computed point this way, but {', '.join(unknown)} "
                               + ("could not be computed from what was read" if not undecided else
                                  "cannot be decided from the histogram buckets")))
                continue
        else:
            if not present or not any(ev.holds for _, ev in present):
                continue
            undecided = []
        evidence = [ev for _, ev in present]
        held = [(sig, ev) for sig, ev in present if ev.holds]
        confidence: Confidence = "low" if undecided else entry.confidence or "low"
        if confidence_cap is not None and _CONFIDENCE.index(confidence) > _CONFIDENCE.index(confidence_cap):
            confidence = confidence_cap
        finding = Finding(id=entry.id, title=entry.title, severity=entry.severity or "info",
                          confidence=confidence,
                          statement=" ".join(entry.statement.split()), evidence=evidence,
                          actions=_actions(entry, kb, advise), sources=_sources(entry),
                          evidence_level=entry.evidence, note=_note(entry, undecided))
        margin = sum(_margin(sig, ev.value) for sig, ev in held) / max(1, len(held))
        scored.append(_Scored(finding, _SEVERITY[finding.severity], ROOT_CAUSE_TAG in entry.tags,
                              _CONFIDENCE.index(confidence), 0.0 if math.isnan(margin) else margin))
    scored.sort(key=lambda s: (-s.severity, not s.root, -s.confidence, -s.margin, s.finding.id))
    return [s.finding for s in scored], abstained
