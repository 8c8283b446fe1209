"""Knowledge base over MCP: the search tool, entry resources and the index resource."""

from __future__ import annotations

import json
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.kb.api import (
    KnowledgeEntryInput,
    KnowledgeSearchInput,
    KnowledgeSearchOutput,
    get_entry,
    list_entries,
    render_entry_markdown,
    search_knowledge,
)
from vllm_tune.tools.kb.schema import Entry

_READ_ONLY_LOCAL = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                   open_world_hint=False)


def register(mcp: MCPServer[Any]) -> None:
    async def _search(request: KnowledgeSearchInput, ctx: Context) -> KnowledgeSearchOutput:
        return search_knowledge(request)

    add_model_tool(
        mcp, name="search_knowledge", title="Search the vLLM tuning knowledge base",
        description=(
            "Search vllm-tune's cited knowledge base of vLLM performance facts: levers (flags and env vars "
            "with rules of thumb), triage rules, pitfalls, metrics, per-version defaults, parallelism and "
            "MoE rules, recipes and benchmarking method. Use it before recommending a flag or explaining a "
            "metric, and cite the returned ids. Returns ranked hits with id, title, evidence level and a "
            "kb://entries/{id} URI; read the entry with get_knowledge_entry for sources and version ranges."
        ),
        input_model=KnowledgeSearchInput, output_model=KnowledgeSearchOutput, run=_search,
        annotations=_READ_ONLY_LOCAL,
    )

    async def _get(request: KnowledgeEntryInput, ctx: Context) -> Entry:
        return get_entry(request)

    add_model_tool(
        mcp, name="get_knowledge_entry", title="Read one knowledge entry",
        description=(
            "Return one knowledge entry in full: statement, vLLM versions it holds for, signals and "
            "thresholds (triage rules), concrete actions, evidence level and sources. Use the ids that "
            "search_knowledge or another vllm-tune tool cited."
        ),
        input_model=KnowledgeEntryInput, output_model=Entry, run=_get, annotations=_READ_ONLY_LOCAL,
    )

    @mcp.resource("kb://entries/{entry_id}", name="knowledge-entry", mime_type="text/markdown",
                  description="One knowledge entry with its sources, as markdown.")
    def entry_resource(entry_id: str) -> str:
        return render_entry_markdown(get_entry(KnowledgeEntryInput(id=entry_id)))

    @mcp.resource("kb://index", name="knowledge-index", mime_type="application/json",
                  description="Every knowledge entry: id, kind, title, evidence, vLLM range and sources.")
    def index_resource() -> str:
        return json.dumps(list_entries().entries, indent=1)
