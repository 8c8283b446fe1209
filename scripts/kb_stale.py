#!/usr/bin/env python3
"""List knowledge entries last verified against a vLLM older than a given version.

    python scripts/kb_stale.py 0.35.0            # table, oldest first
    python scripts/kb_stale.py 0.35.0 --json     # machine-readable
    python scripts/kb_stale.py 0.35.0 --kind flag

Re-verify the listed entries against the new release (see knowledge/README.md, "Refreshing the knowledge base"),
then bump their `last_verified`. Exit status: 0 (listing printed, possibly empty), 2 (bad arguments or a broken
knowledge base).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version

from vllm_tune.knowledge import ENTRIES_DIR
from vllm_tune.tools.errors import KnowledgeError
from vllm_tune.tools.kb.loader import load_from
from vllm_tune.tools.kb.schema import Entry


def _files_by_id(folder: Path) -> dict[str, str]:
    """Which YAML file defines each id, so the listing says where to edit."""
    where: dict[str, str] = {}
    for path in sorted(folder.rglob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        items = raw.get("entries") if isinstance(raw, dict) else raw
        for item in items or []:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                where[item["id"]] = path.name
    return where


def stale_entries(target: Version, folder: Path = ENTRIES_DIR, kind: str | None = None) -> list[dict[str, Any]]:
    """Entries whose last_verified.vllm is older than `target`, oldest first."""
    kb = load_from(folder)
    where = _files_by_id(folder)
    stale: list[tuple[Version, Entry]] = []
    for entry in kb:
        if kind and entry.kind != kind:
            continue
        checked = Version(entry.last_verified.vllm)
        if checked < target:
            stale.append((checked, entry))
    stale.sort(key=lambda pair: (pair[0], pair[1].id))
    return [
        {
            "id": entry.id,
            "kind": entry.kind,
            "file": where.get(entry.id, "?"),
            "evidence": entry.evidence,
            "last_verified": entry.last_verified.model_dump(mode="json"),
            "applies_to": entry.applies_to.vllm.spec,
            "sources": [s.ref for s in entry.sources],
        }
        for _, entry in stale
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kb_stale", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("version", help="the vLLM release to re-verify against, e.g. 0.35.0")
    parser.add_argument("--kind", help="only entries of this kind (flag, metric, ...)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--folder", type=Path, default=ENTRIES_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        target = Version(args.version)
    except InvalidVersion:
        print(f"kb_stale: {args.version!r} is not a version (expected e.g. 0.35.0)", file=sys.stderr)
        return 2
    try:
        rows = stale_entries(target, args.folder, args.kind)
    except KnowledgeError as exc:
        print(f"kb_stale: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"target": str(target), "count": len(rows), "entries": rows}, indent=2))
        return 0
    for row in rows:
        print(f"{row['last_verified']['vllm']:<9} {row['id']:<52} {row['kind']:<13} {row['file']}")
    print(f"{len(rows)} entries last verified before vLLM {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
