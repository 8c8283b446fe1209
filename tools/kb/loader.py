"""Load and validate the knowledge base from its YAML files."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml
from pydantic import ValidationError

from vllm_tune.knowledge import ENTRIES_DIR
from vllm_tune.tools.errors import KnowledgeError
from vllm_tune.tools.kb.schema import Entry

KB_LINK = re.compile(r"kb://entries/([a-z0-9._-]+[a-z0-9])")
# libyaml's loader parses the knowledge base about 10x faster than the pure-Python one (same safe subset);
# PyYAML built without libyaml falls back to the pure-Python loader.
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> object:
    """yaml.safe_load, on libyaml when it is installed (the knowledge base and the catalog)."""
    return yaml.load(text, Loader=_SAFE_LOADER)


class KnowledgeBase:
    """All entries, by id, in file order."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self._by_id: dict[str, Entry] = {}
        for entry in entries:
            if entry.id in self._by_id:
                raise KnowledgeError(f"duplicate knowledge id {entry.id!r}")
            self._by_id[entry.id] = entry

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._by_id.values())

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._by_id

    def get(self, entry_id: str) -> Entry:
        try:
            return self._by_id[entry_id]
        except KeyError:
            raise KeyError(entry_id) from None

    def find(self, entry_id: str) -> Entry | None:
        return self._by_id.get(entry_id)

    def ids(self) -> list[str]:
        return list(self._by_id)

    def dangling_references(self) -> list[tuple[str, str]]:
        """(entry id, missing id) for every `related` id or kb:// link that resolves to nothing."""
        missing: list[tuple[str, str]] = []
        for entry in self:
            refs = list(entry.related)
            for text in (entry.statement, entry.details or "", entry.supersedes or ""):
                refs.extend(KB_LINK.findall(text))
            missing.extend((entry.id, ref) for ref in refs if ref not in self._by_id)
        return missing


def _entries_in(path: Path) -> list[Entry]:
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise KnowledgeError(f"{path.name}: not valid YAML: {exc}") from exc
    if raw is None:
        return []
    items = raw.get("entries") if isinstance(raw, dict) else raw
    if not isinstance(items, list):
        raise KnowledgeError(f"{path.name}: expected a list of entries (or a mapping with 'entries')")
    entries: list[Entry] = []
    for index, item in enumerate(items):
        label = item.get("id", f"#{index}") if isinstance(item, dict) else f"#{index}"
        try:
            entries.append(Entry.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "entry"
            raise KnowledgeError(
                f"{path.name}: entry {label}: {where}: {first['msg']} ({exc.error_count()} error(s))"
            ) from exc
    return entries


def load_from(folder: Path) -> KnowledgeBase:
    """Load every *.yaml file under `folder` (recursively), in sorted path order."""
    if not folder.is_dir():
        raise KnowledgeError(f"knowledge folder {folder} is missing")
    entries: list[Entry] = []
    seen: dict[str, str] = {}
    for path in sorted(folder.rglob("*.yaml")):
        for entry in _entries_in(path):
            if entry.id in seen:
                raise KnowledgeError(f"{path.name}: entry {entry.id}: duplicate id (first defined in {seen[entry.id]})")
            seen[entry.id] = path.name
            entries.append(entry)
    kb = KnowledgeBase(entries)
    dangling = kb.dangling_references()
    if dangling:
        src, ref = dangling[0]
        raise KnowledgeError(f"entry {src!r} refers to unknown entry {ref!r} ({len(dangling)} dangling)")
    return kb


@functools.cache
def load_knowledge() -> KnowledgeBase:
    """The bundled knowledge base, loaded and validated once per process."""
    return load_from(ENTRIES_DIR)
