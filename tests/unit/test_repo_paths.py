"""Tests and benchmarks find their data inside the repository (or ../shared beside it), never at a path
that only exists on one machine: such a test silently skips or fails everywhere else."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A string literal that starts with a machine-specific absolute folder.
_ABSOLUTE = re.compile(r"""["'](/work/|/home/|/root/)""")


def test_no_machine_specific_absolute_paths_in_tests_or_bench() -> None:
    offenders = []
    for folder in ("tests", "bench", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if _ABSOLUTE.search(line) and path.name != "test_repo_paths.py":
                    offenders.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert offenders == []
