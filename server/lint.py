"""lint_config over MCP: a serving configuration checked against a vLLM release and the knowledge base."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.lint.api import LintInput, LintOutput, lint_config
from vllm_tune.tools.lint.render import render_lint

# Reads the given text and, unless offline, the model's config from the Hugging Face hub.
_LINT = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)


def register(mcp: MCPServer[Any]) -> None:
    async def _run(request: LintInput, ctx: Context) -> LintOutput:
        return await anyio.to_thread.run_sync(lambda: lint_config(request))

    add_model_tool(
        mcp, name="lint_config", title="Check a vLLM serving config",
        description=(
            "Check a `vllm serve` command (or --config YAML, env) before starting it: options against the release's "
            "own parser table (unknown, removed, bad values) and the knowledge base's configuration pitfalls. Give "
            "vllm_version and gpu; not_checked lists what needs the model or GPU. Cites knowledge ids."
        ),
        input_model=LintInput, output_model=LintOutput, run=_run, annotations=_LINT, summarize=render_lint,
        advanced=("env", "vllm_version", "nodes", "offline", "device"),
    )
