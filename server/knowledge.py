"""Knowledge base over MCP: the search tool, entry resources and the index resource."""

from __future__ import annotations

from typing import Any, get_args

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.types import ToolAnnotations
from pydantic import ValidationError

from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.kb.api import (
    KnowledgeEntryInput,
    KnowledgeSearchInput,
    KnowledgeSearchOutput,
    get_entry,
    render_entry_markdown,
    render_index,
    render_kind_index,
    search_knowledge,
)
from vllm_tune.tools.kb.schema import Entry, EntryKind

_KINDS: tuple[str, ...] = get_args(EntryKind)

_READ_ONLY_LOCAL = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                   open_world_hint=False)


def _search_summary(out: KnowledgeSearchOutput) -> str:
    lines = [f"{len(out.hits)} hit(s) for {out.query!r} among {out.total_entries} entries:"]
    lines += [f"- {h.id} [{h.kind}, {h.evidence}]: {h.title}" for h in out.hits]
    return "\n".join(lines)


def register(mcp: MCPServer[Any]) -> None:
    async def _search(request: KnowledgeSearchInput, ctx: Context) -> KnowledgeSearchOutput:
        return search_knowledge(request)

    add_model_tool(
        mcp, name="search_knowledge", title="Search the knowledge base",
        description=(
            "Search the cited knowledge base of vLLM performance facts (levers, triage rules, pitfalls, metrics, "
            "flags, defaults, recipes). Use it before recommending a flag or explaining a metric, and cite the ids; "
            "read an entry with get_knowledge_entry."
        ),
        input_model=KnowledgeSearchInput, output_model=KnowledgeSearchOutput, run=_search,
        annotations=_READ_ONLY_LOCAL, summarize=_search_summary,
    )

    async def _get(request: KnowledgeEntryInput, ctx: Context) -> Entry:
        return get_entry(request)

    add_model_tool(
        mcp, name="get_knowledge_entry", title="Read one knowledge entry",
        description=(
            "One knowledge entry in full: statement, vLLM versions it holds for, signals and thresholds, actions, "
            "evidence level and sources."
        ),
        input_model=KnowledgeEntryInput, output_model=Entry, run=_get, annotations=_READ_ONLY_LOCAL,
        summarize=render_entry_markdown,
    )

    @mcp.resource("kb://entries/{entry_id}", name="knowledge-entry", mime_type="text/markdown",
                  description="One knowledge entry with its sources, as markdown.")
    def entry_resource(entry_id: str) -> str:
        try:
            entry = get_entry(KnowledgeEntryInput(id=entry_id))
        except (BadInputError, ValidationError) as exc:
            raise ResourceNotFoundError(str(exc).splitlines()[0]) from None
        return render_entry_markdown(entry)

    @mcp.resource("kb://index", name="knowledge-index", mime_type="text/markdown",
                  description="The knowledge base at a glance: kinds with counts, triage rules and levers by id.")
    def index_resource() -> str:
        return render_index()

    @mcp.resource("kb://index/{kind}", name="knowledge-index-kind", mime_type="text/markdown",
                  description="Every entry of one kind (flag, metric, pitfall, ...): id and title, one a line.")
    def kind_resource(kind: str) -> str:
        if kind not in _KINDS:
            raise ResourceNotFoundError(f"no entry kind {kind!r}; kinds: {', '.join(_KINDS)}")
        return render_kind_index(kind)  # type: ignore[arg-type]
