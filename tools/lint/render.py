"""Text form of a lint_config result, shared by the CLI and the MCP summary."""

from __future__ import annotations

from vllm_tune.tools.lint.api import LintOutput


def render_lint(out: LintOutput) -> str:
    """What `vllm-tune lint` prints: the verdict, option problems, pitfalls that fired, what was not checked."""
    lines: list[str] = []
    lines.append(f"{out.verdict}  (vLLM {out.vllm_version} option table"
          + (f"; model {out.model}" if out.model else "") + ")")
    for p in out.option_problems:
        hint = f" -> {p.suggestion}" if p.suggestion else ""
        lines.append(f"  [{p.severity}] {p.option}: {p.problem}: {p.detail}{hint}  ({', '.join(p.knowledge_ids)})")
    for f in out.findings:
        evidence = ", ".join(f"{e.signal}={e.value:g}" for e in f.evidence)
        lines.append(f"  [{f.severity}] {f.title} [{f.id}, {f.confidence} confidence]: {evidence}")
        for a in f.actions:
            value = f" {a.value}" if a.value else ""
            lines.append(f"      {a.direction} {a.target}{value}: {a.expected_effect}")
        if f.note:
            lines.append(f"      note: {f.note}")
    for n in out.not_checked:
        lines.append(f"  not checked: {n.id} (needs {n.needs})")
    for note in out.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
