"""Plain functions behind `vllm-tune kb ...` and the MCP knowledge tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.kb.loader import load_knowledge
from vllm_tune.tools.kb.schema import Entry, EntryKind
from vllm_tune.tools.kb.search import SearchHit, search


class KnowledgeSearchInput(BaseModel):
    query: str = Field(min_length=1, max_length=500, description="keywords, e.g. 'preemption watermark'")
    kind: EntryKind | None = Field(default=None, description="only entries of this kind")
    vllm_version: str | None = Field(default=None, description="only entries that hold for this vLLM version")
    limit: int = Field(default=8, ge=1, le=50, description="most hits to return")


class KnowledgeSearchOutput(BaseModel):
    query: str
    hits: list[SearchHit]
    total_entries: int


class KnowledgeEntryInput(BaseModel):
    id: str = Field(min_length=3, max_length=120, description="entry id, e.g. triage.preemption-kv-thrash")


class KnowledgeListOutput(BaseModel):
    entries: list[dict[str, Any]]


def search_knowledge(request: KnowledgeSearchInput) -> KnowledgeSearchOutput:
    kb = load_knowledge()
    hits = search(kb, request.query, kind=request.kind, vllm_version=request.vllm_version, limit=request.limit)
    return KnowledgeSearchOutput(query=request.query, hits=hits, total_entries=len(kb))


def get_entry(request: KnowledgeEntryInput) -> Entry:
    entry = load_knowledge().find(request.id)
    if entry is None:
        close = search(load_knowledge(), request.id.replace(".", " "), limit=3)
        hint = f"; did you mean {', '.join(h.id for h in close)}?" if close else ""
        raise BadInputError(f"no knowledge entry {request.id!r}{hint}")
    return entry


def list_entries(kind: EntryKind | None = None) -> KnowledgeListOutput:
    return KnowledgeListOutput(entries=[e.summary() for e in load_knowledge() if kind is None or e.kind == kind])


def render_entry_markdown(entry: Entry) -> str:
    """A readable form of one entry, for people and for MCP resource reads."""
    lines = [f"# {entry.title}", "", f"`{entry.id}` · {entry.kind} · evidence: {entry.evidence}"]
    spec = entry.applies_to.vllm.spec or "any"
    lines.append(f"vLLM: {spec} · last verified {entry.last_verified.date} against v{entry.last_verified.vllm}")
    lines += ["", entry.statement.strip()]
    if entry.details:
        lines += ["", entry.details.strip()]
    if entry.supersedes:
        lines += ["", f"**Corrects:** {entry.supersedes.strip()}"]
    if entry.signals:
        lines += ["", f"## Signals ({entry.match} must hold)"]
        lines += [f"- `{s.signal}` {s.op} {s.threshold:g}{' ' + s.unit if s.unit else ''}: {s.why}"
                  for s in entry.signals]
        lines.append(f"Severity: {entry.severity}; confidence: {entry.confidence}")
    if entry.actions:
        lines += ["", "## Actions"]
        for a in entry.actions:
            value = f" {a.value}" if a.value else ""
            lines.append(f"- {a.direction} `{a.target}`{value}: {a.expected_effect} (risk: {a.risk})")
    lines += ["", "## Sources"]
    for s in entry.sources:
        extra = " · ".join(x for x in (s.url, str(s.date) if s.date else None, s.note) if x)
        lines.append(f"- [{s.kind}] {s.ref}" + (f" ({extra})" if extra else ""))
    if entry.related:
        lines += ["", "Related: " + ", ".join(f"kb://entries/{r}" for r in entry.related)]
    return "\n".join(lines) + "\n"


# Kinds an assistant reads first when it triages or tunes; the index lists them entry by entry.
_INDEX_IN_FULL: tuple[EntryKind, ...] = ("triage", "lever")


def _index_line(entry: Entry) -> str:
    return f"- `{entry.id}`: {entry.title}"


def render_index() -> str:
    """The knowledge base at a glance, within a small context budget: counts per kind with the URI that
    lists each kind, and the triage rules and levers in full (id and title)."""
    kb = load_knowledge()
    counts: dict[str, int] = {}
    for entry in kb:
        counts[entry.kind] = counts.get(entry.kind, 0) + 1
    lines = [f"# vllm-tune knowledge base: {len(kb)} entries",
             "Read an entry: kb://entries/{id} (or get_knowledge_entry); search: search_knowledge.", "",
             "## Kinds"]
    lines += [f"- {kind} ({n}): kb://index/{kind}" for kind, n in sorted(counts.items())]
    for kind in _INDEX_IN_FULL:
        lines += ["", f"## {kind}"]
        lines += [_index_line(e) for e in kb if e.kind == kind]
    return "\n".join(lines) + "\n"


def render_kind_index(kind: EntryKind) -> str:
    entries = [e for e in load_knowledge() if e.kind == kind]
    return "\n".join([f"# {kind} entries ({len(entries)})", *(_index_line(e) for e in entries)]) + "\n"
