"""Every VLLM_TUNE_* variable the code reads is documented in the README's environment table."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_NAME = re.compile(r"\bVLLM_TUNE_[A-Z][A-Z0-9_]*\b")


def _code_names() -> set[str]:
    names: set[str] = set()
    for folder in ("cli", "server", "tools"):
        for path in (ROOT / folder).rglob("*.py"):
            names |= set(_NAME.findall(path.read_text(encoding="utf-8")))
    return names


def _documented() -> set[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    return {m for line in table.splitlines() if line.startswith("| `") for m in _NAME.findall(line.split("|")[1])}


def test_every_variable_in_the_code_is_in_the_readme_table() -> None:
    code = _code_names()
    assert "VLLM_TUNE_ALLOWED_TARGETS" in code  # the scan sees the code at all
    assert code - _documented() == set()


def test_the_table_names_no_variable_the_code_does_not_read() -> None:
    assert _documented() - _code_names() == set()
