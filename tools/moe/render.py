"""Text form of a tune_moe result, shared by the CLI and the MCP summary."""

from __future__ import annotations

from vllm_tune.tools.moe.api import MoeOutput


def render_text(out: MoeOutput) -> str:
    """What `vllm-tune moe` prints: file names, coverage status, log lines, plan, tuning and verification."""
    lines: list[str] = []
    lines.append(f"{out.model} on {out.gpu}: {out.layout}")
    lines.append(f"  config file : {out.config_file_name}")
    if out.down_config_file_name:
        lines.append(f"  optional    : {out.down_config_file_name} (down projection, vLLM >= 0.34)")
    lines.append(f"  status      : {out.status}" + (f" ({out.found_at})" if out.found_at else ""))
    lines.append(f"  meaning     : {out.meaning}")
    for near in out.nearest:
        lines.append(f"  nearest     : {near.file_name}  [{near.relation}]")
    if out.log is not None:
        lines.append(f"  log         : {out.log.summary}")
        for line in out.log.lines:
            match = "" if line.matches_expected is None else (" (this layout)" if line.matches_expected else
                                                             " (another shape)")
            lines.append(f"    line {line.line_no}: {line.kind} {line.file_name or '?'}{match}")
    if out.plan is not None:
        lines.append(f"  plan        : {out.plan.total_points} points over {len(out.plan.batch_sizes)} batch sizes, "
              f"~{out.plan.estimated_minutes} min on {out.plan.workers} worker(s) (rough)")
        for step in out.plan.steps:
            lines.append(f"    - {step}")
    lines.append(f"  tune with   : {out.tune_command}")
    lines.append(f"  or vLLM's   : {out.vllm_script_command}")
    if out.tune is not None:
        if out.tune.ran:
            lines.append(f"\n  tuned       : {out.tune.measured}/{out.tune.total} points, "
                         f"complete={out.tune.complete}, stopped={out.tune.stopped}, wrote {out.tune.written}")
        if out.tune.reason:
            lines.append(f"  note        : {out.tune.reason}")
    if out.verify is not None:
        v = out.verify
        lines.append(f"  verify      : loaded={v.loaded_by_lookup} file={v.file} batch sizes={v.batch_sizes}")
        for problem in v.problems:
            lines.append(f"    problem: {problem}")
        for m in v.ab_result:
            lines.append(f"    {m.metric}: {m.baseline} -> {m.tuned} {m.unit} ({m.change_pct:+}%, noise "
                  f"{m.noise_pct if m.noise_pct is not None else '?'}%) {m.verdict}")
        for step in v.ab_plan:
            lines.append(f"    - {step}")
    for note in out.notes:
        lines.append(f"  note        : {note}")
    lines.append(f"  knowledge   : {', '.join(out.knowledge_ids)}")
    return "\n".join(lines)
