"""Knowledge entries -> alerting rules: triage rows as PromQL conditions, starter thresholds as plain ones."""

from __future__ import annotations

from vllm_tune.tools.alerts.models import AlertRule, SkippedRule
from vllm_tune.tools.alerts.promql import PromQL, SignalUnavailable
from vllm_tune.tools.alerts.starter import ENTRY_ID, NOT_VLLM, THRESHOLDS, Threshold
from vllm_tune.tools.kb.loader import KnowledgeBase
from vllm_tune.tools.kb.schema import Entry

DEFAULT_FOR = "5m"


def alert_name(entry_id: str) -> str:
    """'triage.ttft-high-queue-growing' -> 'VllmTtftHighQueueGrowing'."""
    words = entry_id.split(".", 1)[-1].replace("_", "-").split("-")
    return "Vllm" + "".join(w[:1].upper() + w[1:] for w in words if w)


def _where(p: PromQL) -> str:
    return ", ".join(f"{label}={{{{ $labels.{label} }}}}" for label in p.by)


def _text(value: str) -> str:
    return " ".join(value.split())


def _runbook(entry: Entry) -> str:
    steps = [f"{a.direction} {a.target}" + (f" ({a.value})" if a.value else "") + f": {a.expected_effect} "
             f"(risk: {a.risk})" for a in entry.actions]
    cite = f"Knowledge entry {entry.id}: `vllm-tune kb show {entry.id}`; confirm with `vllm-tune diagnose URL`."
    if entry.evidence == "attributed-claim":
        cite += " The rule rests on an attributed claim (a third-party source, not re-verified in vLLM's source)."
    return " ".join(f"{i}. {s}." for i, s in enumerate(steps, 1)) + " " + cite


def triage_rules(kb: KnowledgeBase, p: PromQL, version: str, hold: str | None
                 ) -> tuple[list[AlertRule], list[SkippedRule]]:
    rules: list[AlertRule] = []
    skipped: list[SkippedRule] = []
    for entry in kb:
        if entry.kind != "triage" or not entry.signals:
            continue
        name = alert_name(entry.id)
        if not entry.applies_to.vllm.contains(version):
            skipped.append(SkippedRule(knowledge_id=entry.id, name=name,
                                       reason=f"holds for vLLM {entry.applies_to.vllm.spec}, not {version}"))
            continue
        conditions: list[str] = []
        shown: list[str] = []
        missing: list[str] = []
        for sig in entry.signals:
            try:
                expr = p.signal(sig.signal)
            except SignalUnavailable as exc:
                missing.append(f"{sig.signal}: {exc}")
                continue
            conditions.append(f"({expr}) {sig.op} {sig.threshold:g}")
            shown.append(f"{sig.signal} {sig.op} {sig.threshold:g} ({sig.why})")
        if not conditions or (entry.match == "all" and missing):
            skipped.append(SkippedRule(knowledge_id=entry.id, name=name, reason="; ".join(missing)))
            continue
        joiner = "\n  and\n" if entry.match == "all" else "\n  or\n"
        first = entry.signals[0].signal if entry.match == "all" else "the first condition that holds"
        rules.append(AlertRule(
            alert=name, expr=joiner.join(conditions), for_duration=hold or DEFAULT_FOR,
            severity=entry.severity or "info", knowledge_id=entry.id, origin="triage",
            summary=f"{entry.title} ({_where(p)}; {first} = {{{{ $value | humanize }}}})",
            description=_text(entry.statement) + " Conditions (" + entry.match + "): " + "; ".join(shown)
            + (". Not checked here: " + "; ".join(missing) if missing else "") + ".",
            runbook=_runbook(entry)))
    return rules, skipped


def _threshold_rule(t: Threshold, entry: Entry, kb: KnowledgeBase, p: PromQL, hold: str | None) -> AlertRule:
    metric_id = p.names.knowledge_id(t.metric)
    metric = kb.find(metric_id) if metric_id else None
    about = f" The series: {_text(metric.statement)}" if metric is not None else ""
    return AlertRule(
        alert=t.alert, expr=f"({t.expr(p)}) {t.op} {t.value:g}", for_duration=hold or t.for_duration or DEFAULT_FOR,
        severity=t.severity, knowledge_id=entry.id, origin="starter-threshold",
        summary=f"{t.what} ({_where(p)}; value {{{{ $value | humanize }}}})",
        description=f"Starter threshold ({entry.id}: \"{t.quote}\"). {_text(entry.details or '')}{about}",
        runbook=f"1. Run `vllm-tune diagnose URL` against the replica to name the bottleneck. 2. Tighten or loosen "
                f"the threshold to your SLO: {_text(entry.statement)} Knowledge entries {entry.id}"
                + (f" and {metric_id}" if metric_id else "") + "; these numbers are an attributed claim "
                "(the vllm-observability skill), not measured optima.")


def starter_rules(kb: KnowledgeBase, p: PromQL, version: str, hold: str | None
                  ) -> tuple[list[AlertRule], list[SkippedRule]]:
    entry = kb.get(ENTRY_ID)
    if not entry.applies_to.vllm.contains(version):
        return [], [SkippedRule(knowledge_id=ENTRY_ID, name=t.alert, reason=f"holds for vLLM "
                                f"{entry.applies_to.vllm.spec}, not {version}") for t in THRESHOLDS]
    rules: list[AlertRule] = []
    skipped = [SkippedRule(knowledge_id=ENTRY_ID, name=name, reason=reason) for name, _, reason in NOT_VLLM]
    for t in THRESHOLDS:
        try:
            rules.append(_threshold_rule(t, entry, kb, p, hold))
        except SignalUnavailable as exc:
            skipped.append(SkippedRule(knowledge_id=ENTRY_ID, name=t.alert, reason=str(exc)))
    return rules, skipped
