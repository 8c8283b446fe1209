"""PNG plots of a run (optional: needs matplotlib, the `plot` extra)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from vllm_tune.tools.bench.capacity import CapacityResult


def write_plots(folder: Path, result: dict[str, Any] | None,
                capacity: CapacityResult | None) -> tuple[list[str], str | None]:
    """Latency-throughput curve and goodput vs load for a capacity search; returns (paths, note)."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return [], "plots skipped: matplotlib is not installed (pip install 'vllm-tune[plot]')"
    if capacity is None or not capacity.curve:
        return [], "plots are drawn for capacity searches only"
    paths: list[str] = []
    pts = sorted((p for p in capacity.curve if p.completed), key=lambda p: p.achieved_request_throughput)
    key = f"p{int(capacity.slo_percentile)}" if float(capacity.slo_percentile).is_integer() \
        else f"p{capacity.slo_percentile}"
    fig, ax = plt.subplots(figsize=(6, 4))
    for metric in ("ttft", "tpot", "e2el"):
        xs = [p.achieved_request_throughput for p in pts if f"{key}_{metric}" in p.latencies_ms]
        ys = [p.latencies_ms[f"{key}_{metric}"] for p in pts if f"{key}_{metric}" in p.latencies_ms]
        if xs:
            ax.plot(xs, ys, marker="o", label=f"{key} {metric}")
        if metric in capacity.slo_ms:
            ax.axhline(capacity.slo_ms[metric], linestyle="--", linewidth=0.8, color="grey",
                       label=f"{metric} SLO")
    if capacity.knee:
        ax.axvline(capacity.knee.achieved_request_throughput, color="grey", linestyle=":", label="knee")
    ax.set_xlabel("achieved request throughput (req/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    path = folder / "latency_throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(str(path))
    # The saturation probe runs closed-loop at a fixed concurrency: its value is not a target rate.
    good = [p for p in capacity.curve if p.request_goodput is not None
            and not (capacity.variable == "rate" and p.phase == "probe")]
    if good:
        fig, ax = plt.subplots(figsize=(6, 4))
        # Boundary values are run more than once: every run is a marker, the line joins the means.
        values = sorted({p.value for p in good})
        series = {"goodput": ([p.request_goodput or 0.0 for p in good], "o"),
                  "throughput": ([p.achieved_request_throughput for p in good], "x")}
        for name, (ys, marker) in series.items():
            means = [sum(y for p, y in zip(good, ys, strict=True) if p.value == v)
                     / sum(1 for p in good if p.value == v) for v in values]
            line = ax.plot(values, means, label=name)[0]
            ax.scatter([p.value for p in good], ys, marker=marker, color=line.get_color())
        ax.set_xlabel("target rate (req/s)" if capacity.variable == "rate" else "concurrency")
        ax.set_ylabel("req/s")
        ax.legend()
        fig.tight_layout()
        path = folder / "goodput.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(str(path))
    return paths, None
