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
            ax.axhline(capacity.slo_ms[metric], linestyle="--", linewidth=0.8)
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
    good = [p for p in capacity.curve if p.request_goodput is not None]
    if good:
        fig, ax = plt.subplots(figsize=(6, 4))
        good.sort(key=lambda p: p.value)
        ax.plot([p.value for p in good], [p.request_goodput or 0.0 for p in good], marker="o", label="goodput")
        ax.plot([p.value for p in good], [p.achieved_request_throughput for p in good], marker="x",
                label="throughput")
        ax.set_xlabel(f"target {capacity.variable}")
        ax.set_ylabel("req/s")
        ax.legend()
        fig.tight_layout()
        path = folder / "goodput.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(str(path))
    return paths, None
