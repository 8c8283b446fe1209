#!/usr/bin/env python3
"""GPU check for tune_moe: tune two batch sizes of one shape with the Triton backend, then verify the file.

For a machine with an H100/H200 (or any CUDA GPU) and vLLM installed in this Python. Budget: under five minutes
(the "quick" search is ~30-60 candidates per batch size; each needs a Triton compile of about a second). Exits 0
when a config file was written for this GPU's device name, vLLM's own lookup loads it, and every measured time is
positive; prints one JSON summary line. Nothing runs without a GPU: it says so and exits 2.

  python bench/gpu_check_moe.py [--out DIR] [--budget-min 4] [--batch-sizes 16 256]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--budget-min", type=float, default=4.0)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 256])
    args = parser.parse_args(argv)

    from vllm_tune.tools.moe.api import local_gpu_names
    from vllm_tune.tools.moe.naming import ConfigKey, normalize_device_name
    from vllm_tune.tools.moe.search_space import TuneShape
    from vllm_tune.tools.moe.timers import TritonTimer
    from vllm_tune.tools.moe.tuner import tune
    from vllm_tune.tools.moe.verify import lookup_like_vllm, lookup_with_real_vllm
    from vllm_tune.tools.moe.writer import write_config

    names = local_gpu_names()
    if not names:
        print(json.dumps({"ok": False, "reason": "no GPU visible (nvidia-smi lists none)"}))
        return 2
    # Mixtral-8x7B at TP4: a shape vLLM ships for H100/H200, so the written file can be compared by eye.
    shape = TuneShape(E=8, N=3584, hidden_size=4096, top_k=2)
    key = ConfigKey(E=shape.E, N=shape.N, device_name=normalize_device_name(names[0]))
    out = args.out or Path(tempfile.mkdtemp(prefix="moe-gpu-check-"))
    t0 = time.monotonic()
    progress_marks: list[int] = []
    result = tune(shape, args.batch_sizes, TritonTimer(iterations=10, warmup=2), checkpoint=out / "checkpoint.json",
                  level="quick", budget_s=args.budget_min * 60,
                  progress=lambda done, total, msg: progress_marks.append(done))
    elapsed = time.monotonic() - t0
    written = write_config(out, key, result.best) if result.best else None
    ours = lookup_like_vllm(key, tuned_folder=str(out), package_dir=None)
    real = lookup_with_real_vllm(sys.executable, key, gpu_full_name=names[0], tuned_folder=str(out))
    ok = (written is not None and ours.configs is not None and real.loaded_from == str(written)
          and set(result.best) == set(args.batch_sizes) and all(t > 0 for t in result.best_time_s.values()))
    print(json.dumps({
        "ok": ok, "gpu": names[0], "file": str(written) if written else None, "elapsed_s": round(elapsed, 1),
        "measured": result.measured, "total": result.total, "failed": result.failed, "stopped": result.stopped,
        "best_time_us": {bs: round(t * 1e6, 2) for bs, t in result.best_time_s.items()},
        "best": result.best, "vllm_loaded_from": real.loaded_from,
    }))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
