"""Write a generated YAML file under knowledge/, or check that the stored one is what its data gives now."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml


def write_or_check(path: Path, doc: dict[str, Any], script: str, *, check: bool) -> int:
    """With check: 1 (and a line naming the script to run) when the stored file differs from `doc`, else 0.
    Without: write `doc` to `path`."""
    if check:
        stored = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
        if stored != doc:
            print(f"{path} is stale: run python {script}", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=110), encoding="utf-8")
    print(f"wrote {path}")
    return 0
