"""Parallelism planner: valid, ranked, explained vLLM layouts (recommend_parallelism)."""

from vllm_tune.tools.parallel.engine import layouts_for, recommend_parallelism
from vllm_tune.tools.parallel.io import (
    Candidate,
    Cited,
    Estimate,
    Layout,
    MemoryBreakdown,
    NodeCommand,
    PlanInput,
    PlanOutput,
    Rejected,
)
from vllm_tune.tools.parallel.rules import ALL_RULE_IDS

__all__ = [
    "ALL_RULE_IDS",
    "Candidate",
    "Cited",
    "Estimate",
    "Layout",
    "MemoryBreakdown",
    "NodeCommand",
    "PlanInput",
    "PlanOutput",
    "Rejected",
    "layouts_for",
    "recommend_parallelism",
]
