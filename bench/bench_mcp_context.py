"""What an assistant's context pays for vllm-tune over MCP, through the SDK's real stdio client: tools/list per
tool and in all (compact JSON, as sent), kb://index, the prompts, and the text block of one diagnosis.

Run: .venv/bin/python bench/bench_mcp_context.py
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters
from mcp.types import ListPromptsResult, ListToolsResult

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "knowledge" / "samples" / "overload"


async def main() -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "vllm_tune.cli", "mcp"], cwd=str(ROOT))
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        prompts = (await client.list_prompts()).prompts
        index = " ".join(getattr(c, "text", "") for c in (await client.read_resource("kb://index")).contents)
        result = await client.call_tool("diagnose_metrics", {
            "metrics_files": [str(SAMPLE / "before.prom"), str(SAMPLE / "after.prom")]})
    print(f"{'tool':<24}{'chars':>8}{'schema':>8}{'desc':>6}")
    for tool in sorted(tools, key=lambda t: -len(ListToolsResult(tools=[t]).model_dump_json(by_alias=True))):
        one = len(ListToolsResult(tools=[tool]).model_dump_json(by_alias=True, exclude_none=True))
        schema = len(json.dumps(tool.input_schema, separators=(",", ":")))
        print(f"{tool.name:<24}{one:>8}{schema:>8}{len(tool.description or ''):>6}")
    total = len(ListToolsResult(tools=tools).model_dump_json(by_alias=True, exclude_none=True))
    print(f"tools/list: {total} characters for {len(tools)} tools (about {total // 4} tokens)")
    print(f"prompts/list: {len(ListPromptsResult(prompts=prompts).model_dump_json(by_alias=True, exclude_none=True))}")
    print(f"kb://index: {len(index)} characters")
    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    print(f"diagnose_metrics result: text {len(text)} characters, structured content "
          f"{len(json.dumps(result.structured_content))} characters")


if __name__ == "__main__":
    asyncio.run(main())
