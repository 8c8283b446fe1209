"""Plain-text rendering of a CompareOutput: one compact table per candidate, then checks and the likely why."""

from __future__ import annotations

from vllm_tune.tools.compare.models import CandidateComparison, CompareOutput, MetricComparison

_MARK = {"blocking": "BLOCKING", "caution": "caution ", "info": "info    "}


def _num(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if abs(value) < 1e6 else f"{value:.3g}"


def _signed(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:+,.{digits}f}"


def _row(m: MetricComparison) -> str:
    name = m.metric if m.statistic == "value" else f"{m.metric} {m.statistic}"
    name = f"{name} ({m.unit})"
    pct = "-" if m.delta_pct is None else f"{m.delta_pct:+.1f}%"
    interval = "-" if m.ci_low is None or m.ci_high is None else f"[{m.ci_low:+.2f}, {m.ci_high:+.2f}]"
    verdict = m.verdict + ("*" if m.basis == "threshold" else "")
    return (f"  {name:<34} {_num(m.baseline):>11} {_num(m.candidate):>11} {_signed(m.delta):>10} {pct:>8} "
            f"{interval:>20}  {verdict}")


def _checks(c: CandidateComparison) -> list[str]:
    lines = ["  checks:"]
    for chk in sorted(c.checks, key=lambda x: ("blocking", "caution", "info").index(x.severity)):
        cite = f" [{', '.join(chk.knowledge_ids)}]" if chk.knowledge_ids else ""
        lines.append(f"    {_MARK[chk.severity]} {chk.message}{cite}")
    return lines


def _candidate(c: CandidateComparison, confidence_label: str) -> list[str]:
    lines = [c.summary]
    # Runs that are not comparable say why before any number, so no one reads the table as a ranking.
    blocked = any(chk.severity == "blocking" for chk in c.checks)
    if blocked:
        lines += _checks(c)
    if c.metrics:
        lines.append(f"  {'metric':<34} {'baseline':>11} {'candidate':>11} {'delta':>10} {'delta%':>8} "
                     f"{confidence_label:>20}  verdict")
        lines += [_row(m) for m in c.metrics]
        if any(m.basis == "threshold" for m in c.metrics):
            lines.append("  * threshold verdict: no per-request values for this metric in both runs (weaker)")
        notes = dict.fromkeys(m.note for m in c.metrics if m.note)
        lines += [f"  note: {n}" for n in notes if n]
    if c.resamples:
        lines.append(f"  bootstrap: {c.resamples} resamples per metric")
    if c.checks and not blocked:
        lines += _checks(c)
    if c.server:
        lines.append(f"  server window (/metrics): {'baseline':>22} {'candidate':>11} {'delta':>10}")
        for s in c.server:
            lines.append(f"    {s.field:<40} {_num(s.baseline):>11} {_num(s.candidate):>11} {_signed(s.delta):>10}")
    if c.likely_why:
        lines.append("  likely why:")
        lines += [f"    - {w.hint} [{', '.join(w.knowledge_ids)}]" for w in c.likely_why]
    lines.append(f"  knowledge: {', '.join(c.knowledge_ids)}")
    return lines


def render_text(out: CompareOutput) -> str:
    lines: list[str] = []
    for run in out.runs:
        role = "baseline " if run.index == out.baseline else "candidate"
        who = run.run_id or run.label or run.path
        counts = "" if run.completed is None else f", {run.completed} ok / {run.failed} failed"
        per = f", per-request: {', '.join(run.per_request)}" if run.per_request else ", aggregates only"
        if run.format == "vllm-tune-capacity":
            per = ""
        lines.append(f"[{run.index}] {role} {who} ({run.format}{counts}{per})")
        lines += [f"      note: {n}" for n in run.notes]
    confidence = f"{out.confidence:.0%} interval"
    for c in out.comparisons:
        lines.append("")
        lines += _candidate(c, confidence)
    return "\n".join(lines) + "\n"
