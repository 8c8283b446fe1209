"""The knowledge base and the planner's commands against vLLM 0.34.0's own option table (knowledge/serve_flags,
built from the 0.34.0 parser): flags and variables it calls current exist there, removed ones are gone, and
every command recommend_parallelism writes for 0.34.0 parses. The 0.32.0 side runs against the live test
vLLM in tests/integration/test_kb_flags_exist.py."""

from __future__ import annotations

import pytest
from packaging.version import Version

from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.lint.api import LintInput, lint_config
from vllm_tune.tools.lint.flags import load_table
from vllm_tune.tools.parallel import PlanInput, recommend_parallelism

TARGET = "0.34.0"
REFUSED = {"unknown", "other-release", "missing-value", "bad-choice", "bad-value"}


def _removed_by(removed_in: str | None, version: str = TARGET) -> bool:
    return removed_in is not None and Version(removed_in) <= Version(version)


def test_flag_entries_agree_with_the_034_parser() -> None:
    table = load_table(TARGET)
    wrong: list[str] = []
    for entry in load_knowledge():
        if entry.flag is None:
            continue
        known = table.resolve(entry.flag.name) is not None
        if _removed_by(entry.flag.removed_in) and known:
            wrong.append(f"{entry.id}: {entry.flag.name} marked removed in {entry.flag.removed_in} but parsed")
        if not _removed_by(entry.flag.removed_in) and not known and entry.applies_to.vllm.contains(TARGET):
            wrong.append(f"{entry.id}: {entry.flag.name} not an option of {TARGET}")
    assert wrong == []


def test_recommended_flags_and_variables_exist_in_034() -> None:
    table = load_table(TARGET)
    missing: list[str] = []
    for entry in load_knowledge():
        if not entry.applies_to.vllm.contains(TARGET):
            continue
        for action in entry.actions:
            if action.kind == "flag" and table.resolve(action.target) is None:
                missing.append(f"{entry.id}: {action.target}")
            if action.kind == "env" and action.target.startswith("VLLM_") and action.target not in table.env_vars:
                missing.append(f"{entry.id}: {action.target}")
    assert missing == []


def test_env_entries_agree_with_034_envs() -> None:
    table = load_table(TARGET)
    wrong = [f"{e.id}: {e.env.name}" for e in load_knowledge()
             if e.env is not None and e.env.name.startswith("VLLM_") and e.applies_to.vllm.contains(TARGET)
             and (e.env.name in table.env_vars) == _removed_by(e.env.removed_in)]
    assert wrong == []


@pytest.mark.parametrize(("model", "gpu", "gpus", "goal"), [
    ("meta-llama/Llama-3.1-70B-Instruct", "H100", 8, "latency"),
    ("deepseek-ai/DeepSeek-V3", "H200", 16, "throughput"),
    ("Qwen/Qwen3-235B-A22B-FP8", "H100", 16, "balanced"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "A100", 4, "throughput"),
])
def test_planner_commands_parse_in_034(model: str, gpu: str, gpus: int, goal: str) -> None:
    out = recommend_parallelism(PlanInput(model=model, gpu=gpu, gpus=gpus, goal=goal, offline=True,  # type: ignore[arg-type]
                                          vllm_version=TARGET))
    commands = [c.command for c in out.candidates] + [n.command for c in out.candidates for n in c.node_commands]
    assert commands
    for command in commands:
        lint = lint_config(LintInput(command=command, vllm_version=TARGET, offline=True))
        refused = [(p.option, p.problem) for p in lint.option_problems if p.problem in REFUSED]
        assert refused == [], command
