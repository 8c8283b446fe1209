"""The knowledge base against the real vLLM 0.32.0: every flag and env var it recommends exists there, flags it
calls removed are gone, and flags it says are newer than 0.32.0 are indeed absent.

The option surface is built once per session by scripts/build_serve_flags.py under the vLLM venv's python (the
same argument parser `vllm serve` uses, and the names `vllm.envs` reads), without starting a server.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from packaging.version import Version
from support.vllm_parser import option_table

from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.kb.schema import Entry

pytestmark = pytest.mark.integration

TEST_VLLM = "0.32.0"
# The parser rewrites -O<n> / -O <n> into --optimization-level before argparse sees it.
ALIASES = {"-O": "--optimization-level"}


@dataclass(frozen=True)
class Surface:
    version: str
    options: frozenset[str]
    env_vars: frozenset[str]

    def has_flag(self, name: str) -> bool:
        return ALIASES.get(name, name) in self.options


@pytest.fixture(scope="session")
def vllm_surface(tmp_path_factory: pytest.TempPathFactory) -> Surface:
    table = option_table(tmp_path_factory.mktemp("surface"))
    options = {s for o in table["options"] for s in [*o["options"], *o.get("hidden", [])]}
    return Surface(table["vllm"], frozenset(options), frozenset(table["env_vars"]))


def _flag_entries() -> dict[str, Entry]:
    return {e.flag.name: e for e in load_knowledge() if e.flag is not None}


def _env_entries() -> dict[str, Entry]:
    return {e.env.name: e for e in load_knowledge() if e.env is not None}


def _base_flag(name: str) -> str:
    return "--" + name[len("--no-"):] if name.startswith("--no-") else name


def _removed_by_test_vllm(removed_in: str | None) -> bool:
    return removed_in is not None and Version(removed_in) <= Version(TEST_VLLM)


def test_surface_is_the_expected_vllm(vllm_surface: Surface) -> None:
    assert vllm_surface.version.startswith(TEST_VLLM)
    assert len(vllm_surface.options) > 100 and "--max-num-seqs" in vllm_surface.options
    assert "VLLM_LOG_STATS_INTERVAL" in vllm_surface.env_vars


def test_every_recommended_flag_exists(vllm_surface: Surface) -> None:
    flags = _flag_entries()
    missing: list[str] = []
    for entry in load_knowledge():
        if not entry.applies_to.vllm.contains(TEST_VLLM):
            continue  # advice for other releases
        for action in entry.actions:
            if action.kind != "flag":
                continue
            name = _base_flag(action.target)
            facts = flags[name].flag if name in flags else None
            if facts is not None and not facts.exists_in_test_vllm:
                continue  # catalogued as newer or removed; checked below
            if not (vllm_surface.has_flag(name) or vllm_surface.has_flag(action.target)):
                missing.append(f"{entry.id}: {action.target}")
    assert missing == [], "recommended flags unknown to vLLM " + TEST_VLLM + ": " + ", ".join(missing)


def test_flag_entries_agree_with_the_real_parser(vllm_surface: Surface) -> None:
    wrong: list[str] = []
    for name, entry in _flag_entries().items():
        assert entry.flag is not None
        present = vllm_surface.has_flag(name)
        if entry.flag.exists_in_test_vllm and not present:
            wrong.append(f"{entry.id}: {name} marked present but missing")
        if not entry.flag.exists_in_test_vllm and present:
            wrong.append(f"{entry.id}: {name} marked absent but accepted")
        if _removed_by_test_vllm(entry.flag.removed_in) and present:
            wrong.append(f"{entry.id}: {name} marked removed in {entry.flag.removed_in} but accepted")
    assert wrong == []


def test_recommended_env_vars_exist_unless_marked_removed(vllm_surface: Surface) -> None:
    envs = _env_entries()
    missing: list[str] = []
    for entry in load_knowledge():
        if not entry.applies_to.vllm.contains(TEST_VLLM):
            continue
        for action in entry.actions:
            if action.kind != "env" or not action.target.startswith("VLLM_"):
                continue  # NCCL_* and other foreign variables are not read through vllm.envs
            facts = envs[action.target].env if action.target in envs else None
            if facts is not None and _removed_by_test_vllm(facts.removed_in):
                continue
            if action.target not in vllm_surface.env_vars:
                missing.append(f"{entry.id}: {action.target}")
    assert missing == []


def test_env_entries_agree_with_vllm_envs(vllm_surface: Surface) -> None:
    wrong: list[str] = []
    for name, entry in _env_entries().items():
        assert entry.env is not None
        if not name.startswith("VLLM_"):
            continue
        present = name in vllm_surface.env_vars
        if _removed_by_test_vllm(entry.env.removed_in) and present:
            wrong.append(f"{entry.id}: {name} marked removed but defined")
        if entry.env.removed_in is None and not present:
            wrong.append(f"{entry.id}: {name} not defined in vllm.envs")
    assert wrong == []
