"""recommend_parallelism at 64 GPUs over the whole model catalog x every catalog GPU: time per plan.

Not run in CI and no assertion on time. For each (model, GPU) pair it plans serving on 64 GPUs (all goals
share the same enumeration, so one goal per pair is timed) and prints the time per plan, plus a baseline:
enumerating the same layouts and applying only the structural validity rules, which any planner pays.

  .venv/bin/python bench/bench_plan.py [--gpus 64] [--goal balanced] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from vllm_tune.tools.errors import VllmTuneError
from vllm_tune.tools.models import ModelFacts, catalog_model_ids, get_gpu, gpu_names, resolve_model
from vllm_tune.tools.parallel import PlanInput, layouts_for, recommend_parallelism
from vllm_tune.tools.parallel.rules import structural_violations


def _best_of(repeat: int, fn: Callable[[], None]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--goal", choices=("latency", "throughput", "balanced"), default="balanced")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    models, gpus = catalog_model_ids(), gpu_names()
    for model in models:  # warm the catalog caches so the timing is the search itself
        resolve_model(model)
    plan_times: list[float] = []
    base_times: list[float] = []
    feasible = 0
    print(f"{'model':48} {'GPU':13} {'plan ms':>8} {'base ms':>8} {'ratio':>6} {'cands':>5} {'rej':>4}")
    for model in models:
        facts = resolve_model(model)
        for gpu in gpus:
            request = PlanInput(model=model, gpu=gpu, gpus=args.gpus, goal=args.goal, top=5)
            result: list[object] = []

            def plan(req: PlanInput = request, out: list[object] = result) -> None:
                try:
                    out[:] = [recommend_parallelism(req)]
                except VllmTuneError as exc:
                    out[:] = [exc]

            domain = get_gpu(gpu).gpus_per_node

            def baseline(count: int = args.gpus, nvl: int = domain, f: ModelFacts = facts) -> None:
                for lay in layouts_for(f, count):
                    structural_violations(f, lay, nvlink_domain=nvl)

            t_plan = _best_of(args.repeat, plan)
            t_base = _best_of(args.repeat, baseline)
            plan_times.append(t_plan)
            base_times.append(t_base)
            out = result[0]
            cands = len(getattr(out, "candidates", []))
            rej = getattr(out, "rejected_total", 0)
            feasible += bool(getattr(out, "feasible", False))
            print(f"{model[:48]:48} {gpu:13} {t_plan * 1e3:8.1f} {t_base * 1e3:8.2f} {t_plan / t_base:6.0f} "
                  f"{cands:5d} {rej:4d}")
    total = sum(plan_times)
    print(f"\n{len(plan_times)} plans ({feasible} feasible) at {args.gpus} GPUs, goal {args.goal}, best of "
          f"{args.repeat}: median {statistics.median(plan_times) * 1e3:.1f} ms, p90 "
          f"{sorted(plan_times)[int(0.9 * len(plan_times))] * 1e3:.1f} ms, max {max(plan_times) * 1e3:.1f} ms, "
          f"total {total:.2f} s; median ratio to the bare enumeration "
          f"{statistics.median(p / b for p, b in zip(plan_times, base_times, strict=True)):.0f}x")


if __name__ == "__main__":
    main()
