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
        mcp, name="lint_config", title="Check a vLLM serving configuration before starting it",
        description=(
            "Check a `vllm serve` command line (and/or a --config YAML and the environment variables) against the "
            "option table of a vLLM release, built from that release's own parser, and against the configuration "
            "pitfalls in the knowledge base. Finds what would stop the server at start-up (unknown options or "
            "options from another release, bad choices, TP not dividing the heads, FP8 block misalignment, a "
            "batched-token budget below the context with chunked prefill off, removed variables) and what starts "
            "but costs performance (--enforce-eager, Ray on one node, VLLM_PORT set, low-density EP ...). Give "
            "vllm_version for the server's release and gpu for hardware-specific checks. Each problem cites "
            "knowledge ids; `not_checked` lists what needs the model's architecture or the GPU."
        ),
        input_model=LintInput, output_model=LintOutput, run=_run, annotations=_LINT, summarize=render_lint,
    )
