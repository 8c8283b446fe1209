"""Build the vllm-tune MCP server: every tool, resource and prompt, registered in one place."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from mcp.server import MCPServer
from mcp.types import Tool as MCPTool

from vllm_tune.server import knowledge, prompts
from vllm_tune.server.schema import compact_schema

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
    `tools/list`, a cost every session pays before its first call."""

    async def list_tools(self) -> list[MCPTool]:
        return [tool.model_copy(update={"input_schema": compact_schema(tool.input_schema), "output_schema": None})
                for tool in await super().list_tools()]


def build_server() -> MCPServer[Any]:
    from importlib.metadata import version

    from vllm_tune.tools import surface

    surface.use("mcp")
    mcp: MCPServer[Any] = VllmTuneServer(name="vllm-tune", title="vllm-tune", instructions=INSTRUCTIONS,
                                    version=version("vllm-tune"), log_level="WARNING")
    knowledge.register(mcp)
    prompts.register(mcp)
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
