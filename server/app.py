"""Build the vllm-tune MCP server: every tool, resource and prompt, registered in one place."""

from __future__ import annotations

import importlib
import json
import logging
from typing import Any

from mcp.server import MCPServer
from mcp.types import Tool as MCPTool

from vllm_tune.server import knowledge, prompts
from vllm_tune.server.registry import ADVANCED, tool_schema_uri
from vllm_tune.server.schema import compact_schema, without_properties

INSTRUCTIONS = (
    "vllm-tune diagnoses and tunes live vLLM deployments. Characterize the workload first, then "
    "diagnose (diagnose_metrics), then pick levers by goal. Every recommendation cites knowledge "
    "entries (kb://entries/{id}); read them with get_knowledge_entry. Tools that send load or start "
    "GPU work ask for confirmation and only reach targets the operator allowed."
)

# Area modules that each expose `register(mcp)`; listed so the wiring stays explicit.
_AREAS = ("diagnose", "parallelism", "moe", "bench", "lint", "compare", "tune", "whatif")


class VllmTuneServer(MCPServer[Any]):
    """Publishes compact input schemas and no output schemas.

    Output models stay registered, so every result is still validated here before it is sent; what the
    client reads is a short text summary plus the structured content. Output schemas were about 70% of
    `tools/list`, a cost every session pays before its first call. A tool's advanced settings are named in
    its `options` parameter; `vllm-tune://tools/{name}` has the whole input schema."""

    async def list_tools(self) -> list[MCPTool]:
        return [tool.model_copy(update={
            "input_schema": without_properties(compact_schema(tool.input_schema), ADVANCED.get(tool.name, ())),
            "output_schema": None}) for tool in await super().list_tools()]

    async def full_input_schema(self, name: str) -> dict[str, Any] | None:
        tool = next((t for t in await super().list_tools() if t.name == name), None)
        return None if tool is None else compact_schema(tool.input_schema)


def _register_schemas(mcp: VllmTuneServer) -> None:
    from mcp.server.mcpserver.exceptions import ResourceNotFoundError

    @mcp.resource(tool_schema_uri("{name}"), name="tool-input-schema", mime_type="application/json",
                  description="A tool's whole input schema, its `options` settings included.")
    async def schema_resource(name: str) -> str:
        schema = await mcp.full_input_schema(name)
        if schema is None:
            raise ResourceNotFoundError(f"no tool {name!r}")
        return json.dumps(schema, separators=(",", ":"))


def build_server() -> MCPServer[Any]:
    from importlib.metadata import version

    from vllm_tune.tools import surface

    surface.use("mcp")
    mcp = VllmTuneServer(name="vllm-tune", title="vllm-tune", instructions=INSTRUCTIONS,
                                    version=version("vllm-tune"), log_level="WARNING")
    knowledge.register(mcp)
    prompts.register(mcp)
    _register_schemas(mcp)
    for area in _AREAS:
        try:
            module = importlib.import_module(f"vllm_tune.server.{area}")
        except ModuleNotFoundError as exc:
            if exc.name != f"vllm_tune.server.{area}":
                raise
            logging.getLogger(__name__).debug("area %s not built yet", area)
            continue
        module.register(mcp)
    return mcp
