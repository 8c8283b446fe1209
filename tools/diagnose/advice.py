"""Concrete values for a finding's actions, taken from the observed workload and the known flags."""

from __future__ import annotations

import math

from vllm_tune.tools.diagnose.models import Capacity, NextStep, ServeFlags, Workload
from vllm_tune.tools.kb.schema import Entry


def _pow2_at_least(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1.0, n))))


class Advisor:
    def __init__(self, workload: Workload, capacity: Capacity, flags: ServeFlags) -> None:
        self.w, self.cap, self.flags = workload, capacity, flags

    def kv_fit(self) -> float | None:
        per_request = (self.w.prompt_tokens_mean or 0) + (self.w.output_tokens_mean or 0)
        if not self.cap.kv_cache_size_tokens or per_request <= 0:
            return None
        return self.cap.kv_cache_size_tokens / per_request

    def __call__(self, entry: Entry, target: str, direction: str) -> str | None:
        if target == "--max-num-batched-tokens" and direction == "raise":
            return self._budget()
        if target == "--max-num-seqs":
            return self._max_num_seqs(direction)
        return None

    def _budget(self) -> str | None:
        budget, p90 = self.flags.max_num_batched_tokens, self.w.prompt_tokens_p90
        if budget is None or p90 is None:
            return None
        want = max(2048, _pow2_at_least(p90))
        if want <= budget:
            return None
        steps = math.ceil(p90 / budget)
        return f"{want} (now {budget}: a p90 prompt of {p90:.0f} tokens needs {steps} steps before its first token)"

    def _max_num_seqs(self, direction: str) -> str | None:
        current, fit = self.flags.max_num_seqs, self.kv_fit()
        if direction == "lower" and fit is not None:
            target = max(1, math.floor(fit))
            if current is None or target < current:
                now = f"now {current}; " if current else ""
                return f"{target} ({now}the KV cache holds about {fit:.1f} requests of the observed size)"
        if direction == "raise" and current is not None:
            if fit is not None and fit <= current:
                return (f"only with more KV room: the KV cache holds about {fit:.1f} requests of the observed size "
                        f"and max_num_seqs is already {current}")
            target = current * 2 if fit is None else min(current * 2, math.floor(fit))
            return f"{target} (now {current})"
        return None


def next_steps(*, finding_ids: list[str], workload: Workload, capacity: Capacity, url: str | None,
               model: str | None, moe: dict[str, object] | None, needs_longer_window: bool,
               window_s: float | None) -> list[NextStep]:
    steps: list[NextStep] = []
    if moe is not None:
        steps.append(NextStep(tool="tune_moe", why="the log shows the default (untuned) fused-MoE config in use",
                              arguments=moe))
    kv_bound = {"triage.preemption-kv-thrash", "triage.kv-cache-near-full",
                "triage.kv-cache-too-small-for-max-num-seqs"} & set(finding_ids)
    if kv_bound:
        args: dict[str, object] = {}
        if model:
            args["model"] = model
        if capacity.max_model_len:
            args["max_model_len"] = capacity.max_model_len
        concurrency = (workload.running_mean or 0) + (workload.waiting_mean or 0)
        if concurrency > 0:
            args["target_concurrency"] = max(1, math.ceil(concurrency))
        steps.append(NextStep(tool="recommend_parallelism",
                              why="KV-cache bound: a layout with more KV memory per replica removes preemptions",
                              arguments=args))
    if workload.finished_requests:
        bench: dict[str, object] = {"url": url} if url else {}
        if model:
            bench["model"] = model
        if workload.prompt_tokens_mean:
            bench["input_len"] = max(1, round(workload.prompt_tokens_mean))
        if workload.output_tokens_mean:
            bench["output_len"] = max(1, round(workload.output_tokens_mean))
        conc = workload.in_system_mean or ((workload.running_mean or 0) + (workload.waiting_mean or 0))
        if conc and conc > 0:
            bench["concurrency"] = max(1, math.ceil(conc))
        elif workload.request_rate_per_s:
            bench["rate"] = round(workload.request_rate_per_s, 3)
        bench["num_prompts"] = max(50, min(1000, (workload.finished_requests or 0) * 2))
        steps.append(NextStep(tool="run_benchmark",
                              why="reproduce the observed workload to confirm the diagnosis and measure any fix "
                                  "(same lengths and concurrency)", arguments=bench))
    if needs_longer_window:
        steps.append(NextStep(tool="diagnose_metrics", why="too few requests finished in the window to judge",
                              arguments={"url": url, "window_s": max(30.0, (window_s or 10.0) * 3)}))
    for fid in finding_ids[:3]:
        steps.append(NextStep(tool="get_knowledge_entry", why="read the cited rule, its sources and versions",
                              arguments={"id": fid}))
    return steps
