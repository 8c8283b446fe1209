"""Text form of a run_benchmark result, shared by the CLI and the MCP summary."""

from __future__ import annotations

from typing import Any

from vllm_tune.tools.bench.api import BenchmarkResultsOutput, RunBenchmarkOutput
from vllm_tune.tools.slo import percentile_label


def render_summary(out: RunBenchmarkOutput) -> str:
    """What `vllm-tune bench` prints: vllm bench serve's result table, the client self-check, the server's
    view of the same window and the capacity search."""
    lines: list[str] = []
    r = out.result
    if r is not None:
        d = r.model_dump()
        rows = [("Successful requests", d["completed"]), ("Failed requests", d["failed"]),
                ("Benchmark duration (s)", d["duration"]), ("Total input tokens", d["total_input_tokens"]),
                ("Total generated tokens", d["total_output_tokens"]),
                ("Request throughput (req/s)", d["request_throughput"]),
                ("Request goodput (req/s)", d["request_goodput"]),
                ("Output token throughput (tok/s)", d["output_throughput"]),
                ("Peak output token throughput (tok/s)", d["max_output_tokens_per_s"]),
                ("Peak concurrent requests", d["max_concurrent_requests"]),
                ("Total token throughput (tok/s)", d["total_token_throughput"])]
        lines.append(f"{' Serving Benchmark Result ':=^56}")
        for name, value in rows:
            if value is not None:
                shown = f"{value:>14.2f}" if isinstance(value, float) else f"{value:>14}"
                lines.append(f"{name + ':':<42}{shown}")
        for metric in ("ttft", "tpot", "itl", "e2el"):
            lines.append(f"{' ' + metric.upper() + ' (ms) ':-^56}")
            for key, value in d.items():
                if key.endswith(f"_{metric}_ms") and not key.startswith("std_"):
                    lines.append(f"{key:<42}{value:>14.2f}")
        lines.extend(_slo_lines(d))
        check = d.get("client_check", {})
        lines.append(f"{' Client self-check ':-^56}")
        lines.append(f"{'p99 schedule lag (ms)':<42}{check.get('p99_lag_ms', 0.0):>14.2f}")
        lines.append(f"{'client CPU s per 1000 requests':<42}{check.get('client_cpu_per_1k_requests_s', 0.0):>14.2f}")
        server = d.get("server") or {}
        if server.get("scrapes"):
            lines.append(f"{' Server (/metrics, same window) ':-^56}")
            for key in ("max_running", "max_waiting", "max_kv_cache_usage", "preemptions", "server_mean_ttft_ms",
                        "server_mean_queue_time_ms", "client_minus_server_mean_ttft_ms"):
                if server.get(key) is not None:
                    lines.append(f"{key:<42}{server[key]:>14.2f}")
    if out.capacity is not None:
        c = out.capacity
        lines.append(f"{' SLO capacity (simulated) ' if c.simulated else ' SLO capacity ':=^56}")
        for p in c.curve:
            mark = "pass" if p.meets_slo else "FAIL"
            var = "concurrency" if p.phase == "probe" else c.variable
            lines.append(f"  {p.phase:<8} {var}={p.value:<9.4g} achieved {p.achieved_request_throughput:8.2f} req/s "
                  f"{mark} {'; '.join(p.violations)}")
        lines.append(f"capacity: {c.capacity}  ({c.confidence})")
        targets = ", ".join(f"{k}<={v:g} ms" for k, v in c.slo_ms.items())
        lines.append(f"SLO {targets} at {percentile_label(c.slo_percentile)}"
                     + (f"; decided by: {'; '.join(c.decided_by)}" if c.decided_by else ""))
        if c.knee:
            lines.append(f"knee of the latency-throughput curve: {c.variable}={c.knee.value:g} "
                  f"({c.knee.achieved_request_throughput:.2f} req/s)")
    if out.simulation is not None:
        lines += _simulation_lines(out)
    for w in out.warnings:
        lines.append(f"warning: {w}")
    lines.append(f"run id {out.run_id}; results: {out.result_path}")
    return "\n".join(lines)


def _slo_lines(d: dict[str, Any]) -> list[str]:
    """Which targets decided goodput (every one, per request) and how each fared at the SLO percentile."""
    slo = d.get("slo_ms") or {}
    if not slo:
        return []
    targets = ", ".join(f"{k}<={v:g} ms" for k, v in slo.items())
    lines = [f"{' SLO ':-^56}", f"goodput counts requests meeting every target ({targets}), per request"]
    for check in d.get("slo_checks") or []:
        lines.append(f"{check['status']}: {check['decided_by']}")
    return lines


def _simulation_lines(out: RunBenchmarkOutput) -> list[str]:
    sim = out.simulation
    assert sim is not None
    lines = [f"predicted by what_if (calibration: {sim.calibration_source}); no search load was sent",
             f"uncertainty: {sim.uncertainty}"]
    v = sim.verify
    if v is not None:
        lines.append(f"{' Verify: one real run at the predicted capacity ':-^56}")
        lines.append(f"{v.variable}={v.value:g}, run {v.run_id}")
        lines.append(f"{'':<24}{'predicted':>12}{'measured':>12}{'error':>8}")
        rows = [("goodput (req/s)", v.predicted.request_goodput, v.measured.request_goodput, "request_goodput"),
                ("throughput (req/s)", v.predicted.achieved_request_throughput,
                 v.measured.achieved_request_throughput, "request_throughput")]
        rows += [(f"{k} (ms)", v.predicted.latencies_ms.get(k), got, k) for k, got in v.measured.latencies_ms.items()]
        for name, pred, got, key in rows:
            err = v.relative_errors.get(key)
            lines.append(f"{name:<24}{_num(pred):>12}{_num(got):>12}{'' if err is None else f'{err:+.0%}':>8}")
        lines.append(v.verdict)
    lines += [f"note: {n}" for n in sim.notes if not n.startswith("simulated:")]
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


_SAVED_ROWS = ("completed", "failed", "duration", "request_throughput", "request_goodput", "output_throughput",
               "total_token_throughput")


def render_saved(out: BenchmarkResultsOutput) -> str:
    """A saved result's headline numbers: counts, throughput, and each latency metric's mean/median/p99."""
    d = out.result
    lines = [f"run {out.run_id} ({out.state}): {out.result_path}"]
    lines += [f"{key}: {d[key]:.2f}" if isinstance(d[key], float) else f"{key}: {d[key]}"
              for key in _SAVED_ROWS if d.get(key) is not None]
    for metric in ("ttft", "tpot", "itl", "e2el"):
        cells = [f"{key.removesuffix(f'_{metric}_ms')} {value:.2f}" for key, value in d.items()
                 if key.endswith(f"_{metric}_ms") and not key.startswith("std_") and isinstance(value, int | float)]
        if cells:
            lines.append(f"{metric} ms: " + ", ".join(cells))
    if out.omitted:
        lines.append("left out (detail=true for them): " + ", ".join(out.omitted))
    return "\n".join(lines)
