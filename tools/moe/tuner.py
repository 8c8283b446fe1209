"""The tuning loop: time every candidate tile config per batch size and keep the fastest.

Timing sits behind the ``KernelTimer`` seam so the loop, checkpointing and resume logic run (and are tested) without a
GPU. A checkpoint JSON is rewritten atomically after every measured point; re-running with the same checkpoint skips
what is already measured. A time budget and a cancel event stop the loop between points; whatever was measured so far
still yields a best config for each batch size that has at least one measurement.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.search_space import KernelConfig, Level, TuneShape, candidates, config_id, space_fingerprint

CHECKPOINT_FORMAT = 1
ProgressFn = Callable[[int, int, str], None]


class KernelTimer(Protocol):
    """Seconds one fused-MoE call takes for ``shape`` at ``batch_size`` tokens with tile config ``config``.

    Raise any exception for a config the kernel cannot run (e.g. out of shared memory); the tuner records it as
    failed and moves on."""

    def time_config(self, shape: TuneShape, batch_size: int, config: KernelConfig) -> float: ...


@dataclass
class TuneResult:
    best: dict[int, KernelConfig]
    best_time_s: dict[int, float]
    measured: int
    total: int
    failed: int
    complete: bool
    stopped: str | None
    checkpoint: str
    elapsed_s: float
    batch_sizes: list[int] = field(default_factory=list)


def write_json_atomic(path: Path, body: Any) -> None:
    """Write JSON so a reader (or a crash) never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(body, handle, indent=1, sort_keys=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def shape_to_json(shape: TuneShape) -> dict[str, Any]:
    return {"E": shape.E, "N": shape.N, "hidden_size": shape.hidden_size, "top_k": shape.top_k,
            "dtype": shape.dtype, "block_shape": list(shape.block_shape) if shape.block_shape else None}


def shape_from_json(body: dict[str, Any]) -> TuneShape:
    block = body.get("block_shape")
    return TuneShape(E=int(body["E"]), N=int(body["N"]), hidden_size=int(body["hidden_size"]),
                     top_k=int(body["top_k"]), dtype=body.get("dtype"),
                     block_shape=(int(block[0]), int(block[1])) if block else None)


def load_checkpoint(path: Path, fingerprint: str) -> dict[str, dict[str, float | None]]:
    """Measured points from a checkpoint of the same search; a checkpoint of another search is refused."""
    if not path.exists():
        return {}
    try:
        body = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInputError(f"checkpoint {path} is unreadable ({exc}); move it away to start over") from exc
    if body.get("format") != CHECKPOINT_FORMAT or body.get("fingerprint") != fingerprint:
        raise BadInputError(f"checkpoint {path} belongs to a different shape or search space; "
                            "use another checkpoint path or delete it to start over")
    measured = body.get("measured", {})
    return {str(bs): dict(points) for bs, points in measured.items()}


def best_of(measured: dict[str, dict[str, float | None]], shape: TuneShape, level: Level
            ) -> tuple[dict[int, KernelConfig], dict[int, float]]:
    best: dict[int, KernelConfig] = {}
    times: dict[int, float] = {}
    for bs_text, points in measured.items():
        bs = int(bs_text)
        by_id = {config_id(c): c for c in candidates(shape, bs, level)}
        ok = [(t, cid) for cid, t in points.items() if t is not None and math.isfinite(t) and cid in by_id]
        if ok:
            t, cid = min(ok)
            best[bs] = dict(by_id[cid])
            times[bs] = t
    return dict(sorted(best.items())), dict(sorted(times.items()))


def tune(shape: TuneShape, batch_sizes: list[int], timer: KernelTimer, *, checkpoint: Path,
         level: Level = "pruned", budget_s: float | None = None, progress: ProgressFn | None = None,
         cancel: threading.Event | None = None, clock: Callable[[], float] = time.monotonic) -> TuneResult:
    if not batch_sizes or any(bs < 1 for bs in batch_sizes):
        raise BadInputError("batch sizes must be a non-empty list of positive integers")
    sizes = sorted(set(batch_sizes))
    fingerprint = space_fingerprint(shape, sizes, level)
    measured = load_checkpoint(checkpoint, fingerprint)
    plan = [(bs, cfg) for bs in sizes for cfg in candidates(shape, bs, level)]
    total = len(plan)
    done = sum(1 for bs, cfg in plan if config_id(cfg) in measured.get(str(bs), {}))
    start = clock()
    stopped: str | None = None

    def save() -> None:
        write_json_atomic(checkpoint, {"format": CHECKPOINT_FORMAT, "fingerprint": fingerprint, "level": level,
                                       "shape": shape_to_json(shape), "batch_sizes": sizes, "measured": measured})

    if progress:
        progress(done, total, f"resuming with {done} of {total} points measured" if done else "starting")
    for bs, cfg in plan:
        cid = config_id(cfg)
        if cid in measured.get(str(bs), {}):
            continue
        if cancel is not None and cancel.is_set():
            stopped = "cancelled"
            break
        if budget_s is not None and clock() - start >= budget_s:
            stopped = "budget"
            break
        try:
            seconds: float | None = float(timer.time_config(shape, bs, cfg))
        except Exception:  # the kernel rejects this tile (resources, compile error): skip it, keep going
            seconds = None
        measured.setdefault(str(bs), {})[cid] = seconds
        save()
        done += 1
        if progress:
            progress(done, total, f"batch size {bs}: {cid}")
    if not measured:
        save()
    best, times = best_of(measured, shape, level)
    failed = sum(1 for points in measured.values() for t in points.values() if t is None)
    return TuneResult(best=best, best_time_s=times, measured=done, total=total, failed=failed,
                      complete=done == total, stopped=stopped, checkpoint=str(checkpoint),
                      elapsed_s=clock() - start, batch_sizes=sizes)
