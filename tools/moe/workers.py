"""One tuning worker per visible GPU, each a subprocess pinned with CUDA_VISIBLE_DEVICES.

Batch sizes are dealt round-robin to workers; each worker keeps its own checkpoint, so an interrupted run resumes per
worker. The parent reads JSON progress lines from the workers, enforces cancellation by terminating them (every
measured point is already on disk), and merges the checkpoints into one best-config map.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.search_space import KernelConfig, Level, TuneShape, space_fingerprint
from vllm_tune.tools.moe.tuner import ProgressFn, best_of, load_checkpoint, shape_from_json, shape_to_json, tune


def visible_gpus() -> list[str]:
    """GPU ids a worker may be pinned to: CUDA_VISIBLE_DEVICES when set, else what ``nvidia-smi -L`` lists."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def split_batch_sizes(batch_sizes: list[int], workers: int) -> list[list[int]]:
    """Deal batch sizes round-robin, largest first, so the slow big sizes spread over workers."""
    shares: list[list[int]] = [[] for _ in range(max(1, workers))]
    for i, bs in enumerate(sorted(set(batch_sizes), reverse=True)):
        shares[i % len(shares)].append(bs)
    return [sorted(s) for s in shares if s]


@dataclass
class ParallelResult:
    best: dict[int, KernelConfig]
    best_time_s: dict[int, float]
    measured: int
    total: int
    complete: bool
    stopped: str | None
    checkpoints: list[str]
    worker_errors: list[str]


def run_parallel(shape: TuneShape, batch_sizes: list[int], *, work_dir: Path, gpus: list[str], backend: str,
                 level: Level = "pruned", budget_s: float | None = None, progress: ProgressFn | None = None,
                 cancel: threading.Event | None = None, python: str = sys.executable) -> ParallelResult:
    if not gpus:
        raise BadInputError("no GPU is visible to run tuning workers on")
    work_dir.mkdir(parents=True, exist_ok=True)
    shares = split_batch_sizes(batch_sizes, len(gpus))
    procs: list[tuple[subprocess.Popen[str], Path, list[int]]] = []
    for i, (gpu, share) in enumerate(zip(gpus, shares, strict=False)):
        ckpt = work_dir / f"checkpoint-E{shape.E}-N{shape.N}-{'-'.join(map(str, share))}.json"
        spec = {"shape": shape_to_json(shape), "batch_sizes": share, "backend": backend, "level": level,
                "budget_s": budget_s, "checkpoint": str(ckpt)}
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
        # stderr goes to a file: a worker that logs a lot (vLLM, Triton) must never block on a full pipe.
        with (work_dir / f"worker-{i}.log").open("w") as log:
            proc = subprocess.Popen([python, "-m", "vllm_tune.tools.moe.workers", json.dumps(spec)], env=env,
                                    stdout=subprocess.PIPE, stderr=log, text=True)
        procs.append((proc, ckpt, share))
    state: dict[int, tuple[int, int]] = {}
    lock = threading.Lock()

    def pump(idx: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            with lock:
                state[idx] = (int(msg["done"]), int(msg["total"]))
                done = sum(d for d, _ in state.values())
                total = sum(t for _, t in state.values())
            if progress:
                progress(done, total, f"worker {idx} (GPU {gpus[idx]}): {msg.get('message', '')}")

    readers = [threading.Thread(target=pump, args=(i, p), daemon=True) for i, (p, _, _) in enumerate(procs)]
    for reader in readers:
        reader.start()
    stopped = _wait(procs, cancel)
    for reader in readers:
        reader.join(timeout=5)
    errors = []
    for i, (p, _, share) in enumerate(procs):
        if p.returncode not in (0, None) and stopped is None:
            err = (work_dir / f"worker-{i}.log").read_text(errors="replace").strip().splitlines()
            errors.append(f"worker for batch sizes {share} exited {p.returncode}: {err[-1] if err else ''}")
    best, times, measured = _merge(shape, level, [(c, share) for _, c, share in procs])
    total = sum(t for _, t in state.values()) or measured
    complete = measured == total and not errors and stopped is None
    if stopped is None and not complete and budget_s is not None:
        stopped = "budget"
    return ParallelResult(dict(sorted(best.items())), dict(sorted(times.items())), measured, total, complete,
                          stopped, [str(c) for _, c, _ in procs], errors)


def _wait(procs: list[tuple[subprocess.Popen[str], Path, list[int]]], cancel: threading.Event | None) -> str | None:
    stopped: str | None = None
    while any(p.poll() is None for p, _, _ in procs):
        if cancel is not None and cancel.is_set() and stopped is None:
            stopped = "cancelled"
            for p, _, _ in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    return stopped


def _merge(shape: TuneShape, level: Level, parts: list[tuple[Path, list[int]]]
           ) -> tuple[dict[int, KernelConfig], dict[int, float], int]:
    best: dict[int, KernelConfig] = {}
    times: dict[int, float] = {}
    measured = 0
    for ckpt, share in parts:
        points = load_checkpoint(ckpt, space_fingerprint(shape, share, level))
        b, t = best_of(points, shape, level)
        best.update(b)
        times.update(t)
        measured += sum(len(v) for v in points.values())
    return best, times, measured


def _worker_main(argv: list[str]) -> int:
    from vllm_tune.tools.moe.timers import make_timer

    parser = argparse.ArgumentParser(prog="vllm_tune.tools.moe.workers")
    parser.add_argument("spec", help="JSON job spec")
    spec: dict[str, Any] = json.loads(parser.parse_args(argv).spec)
    cancel = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: cancel.set())

    def report(done: int, total: int, message: str) -> None:
        print(json.dumps({"done": done, "total": total, "message": message}), flush=True)

    tune(shape_from_json(spec["shape"]), list(spec["batch_sizes"]), make_timer(spec["backend"]),
         checkpoint=Path(spec["checkpoint"]), level=spec["level"], budget_s=spec.get("budget_s"),
         progress=report, cancel=cancel)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
