"""A compact human-readable report of a DiagnoseOutput."""

from __future__ import annotations

from vllm_tune.tools.diagnose.models import Capacity, DiagnoseOutput, Percentile, Percentiles
from vllm_tune.tools.slo import percentile_label


def _num(value: float | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "?"
    return f"{value:,.{digits}f}{unit}"


def _one(p: Percentile | None) -> str:
    if p is None:
        return "?"
    if p.kind == "below_first_edge":
        return f"< {p.upper_ms:g}"
    if p.kind == "above_last_edge":
        return f"> {p.lower_ms:g}"
    return _num(p.value_ms)


def _pct(p: Percentiles | None, judged: float) -> str:
    """p50 / p90 / p99 (and the SLO percentile if another); bounds where the buckets only give a bound."""
    if p is None:
        return "-"
    qs = sorted({50.0, 90.0, 99.0, judged})
    parts = " / ".join(f"p{q:g} {_one(p.at(q))}" for q in qs)
    return f"{parts} ms, mean {_num(p.mean_ms)} ms (n={p.count})"


def _at(out: DiagnoseOutput, key: str, q: float) -> Percentile | None:
    dist: Percentiles | None = getattr(out.latency, key, None)
    return dist.at(q) if dist is not None else None


def _kv_seen(c: Capacity) -> str:
    seen = _num(None if c.kv_usage_max is None else c.kv_usage_max * 100, '%')
    if c.kv_usage_max is not None and c.kv_usage_max < 1.0 and (c.preemptions or 0) > 0:
        seen += " in the scrapes (full between them: preemptions)"
    return seen


def render_report(out: DiagnoseOutput, *, max_caveats: int = 6) -> str:
    lines: list[str] = []
    metric_sources = [src for src in out.sources_used if not src.startswith("server log")]
    where = out.server.url or (metric_sources or out.sources_used or ["input"])[0]
    ver = f" (vLLM {out.server.version})" if out.server.version else ""
    span = f"{out.window_s:.1f} s window" if out.window_s else out.view
    lines.append(f"vllm-tune diagnose: {where}{ver}, {span}")
    lines.append(f"Verdict: {out.verdict}")
    if out.warmup:
        lines.append(f"Warm-up: {out.warmup}")
    w = out.workload
    if w.finished_requests is not None or w.running_mean is not None:
        lines.append(
            f"Workload: {w.finished_requests if w.finished_requests is not None else '?'} finished, "
            f"{_num(w.request_rate_per_s, ' req/s', 2)}, prompt {_num(w.prompt_tokens_mean, '', 0)} / output "
            f"{_num(w.output_tokens_mean, '', 0)} tokens (mean), running {_num(w.running_mean, '', 2)}, waiting "
            f"{_num(w.waiting_mean, '', 2)}")
    lat = out.latency
    for key in ("ttft", "itl", "tpot", "e2el", "queue"):
        p = getattr(lat, key)
        if p is not None:
            lines.append(f"  {key.upper():<5} {_pct(p, out.slo_percentile)}")
    if out.slo:
        src = "your SLO" if out.slo_source == "user" else "default targets"
        label = percentile_label(out.slo_percentile)
        parts = [f"{k} {r.status} ({label} {_one(_at(out, k, r.percentile))} vs {r.target_ms:g} ms)"
                 for k, r in out.slo.items()]
        lines.append(f"SLO ({src}, judged at {label}): " + "; ".join(parts))
    c = out.capacity
    lines.append(f"Capacity: KV usage max {_kv_seen(c)}, "
                 f"preemptions {_num(c.preemptions, '', 0)}, max_num_seqs {c.max_num_seqs or '?'}, "
                 f"KV cache {c.kv_cache_size_tokens or '?'} tokens, prefix caching "
                 f"{'on' if c.prefix_caching_enabled else 'off' if c.prefix_caching_enabled is False else '?'}")
    if out.findings:
        lines.append("Findings:")
    for i, f in enumerate(out.findings, 1):
        lines.append(f"  {i}. [{f.severity}] {f.title} ({f.id}, {f.confidence} confidence)")
        for ev in f.evidence:
            mark = "" if ev.holds else " (undecided: bucket straddles it)" if ev.holds is None else " (not met)"
            lines.append(f"     - {ev.signal} = {ev.value:g} {ev.op} {ev.threshold:g}{mark}" +
                         (f"  [{ev.how}]" if ev.how else ""))
        for a in f.actions[:3]:
            value = f" {a.value}" if a.value else ""
            lines.append(f"     -> {a.direction} {a.target}{value}: {a.expected_effect} (risk: {a.risk})")
        if f.note:
            lines.append(f"     note: {f.note}")
    for ab in out.abstained:
        lines.append(f"  abstained {ab.id}: {ab.reason}")
    if out.next_steps:
        lines.append("Next: " + "; ".join(f"{s.tool}({', '.join(f'{k}={v}' for k, v in s.arguments.items())})"
                                          for s in out.next_steps[:3]))
    for cav in out.caveats[:max_caveats]:
        lines.append(f"  caveat: {cav}")
    if len(out.caveats) > max_caveats:
        lines.append(f"  ({len(out.caveats) - max_caveats} more caveats in --json)")
    return "\n".join(lines) + "\n"
