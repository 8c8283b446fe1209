"""What an assistant pays to use the server, measured through the SDK's real stdio client against
`vllm-tune mcp` as a subprocess: the size of tools/list and kb://index, every parameter and prompt argument
described, and tool results whose text block is a short summary (the full result is structured content)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import ListToolsResult

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "knowledge" / "samples"
# tools/list as it goes over the wire (compact JSON): issue 19's budget. Settings most calls leave at their
# defaults are named in each tool's `options` parameter, their schema one resource read away.
TOOLS_LIST_BUDGET = 24_000
INDEX_BUDGET = 16_000
SUMMARY_BUDGET = 3_000


def _params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "vllm_tune.cli", "mcp"], cwd=str(ROOT))


def _described(schema: dict[str, Any]) -> list[str]:
    missing = [f"property {name}" for name, prop in (schema.get("properties") or {}).items()
               if not prop.get("description")]
    for def_name, definition in (schema.get("$defs") or {}).items():
        missing += [f"{def_name}.{name}" for name, prop in (definition.get("properties") or {}).items()
                    if not prop.get("description")]
    return missing


async def test_tools_list_and_index_fit_their_budgets_and_everything_is_described() -> None:
    with anyio.fail_after(120):
        async with Client(_params()) as client:
            tools = (await client.list_tools()).tools
            wire = ListToolsResult(tools=tools).model_dump_json(by_alias=True, exclude_none=True)
            index = " ".join(getattr(c, "text", "") for c in (await client.read_resource("kb://index")).contents)
            prompts = (await client.list_prompts()).prompts
    print(f"tools/list {len(wire)} characters for {len(tools)} tools; kb://index {len(index)} characters")
    assert len(tools) >= 17
    assert len(wire) <= TOOLS_LIST_BUDGET
    assert len(index) <= INDEX_BUDGET
    for tool in tools:
        assert tool.output_schema is None, tool.name  # results are validated server-side, not published
        assert tool.description and len(tool.description) <= 500, tool.name
        assert _described(tool.input_schema) == [], tool.name
        assert '"title"' not in json.dumps(tool.input_schema), tool.name
    for prompt in prompts:
        assert prompt.description, prompt.name
        assert all(a.description for a in prompt.arguments or []), prompt.name


async def test_a_diagnosis_result_is_a_short_summary_plus_the_whole_result() -> None:
    before = (SAMPLES / "overload" / "before.prom").read_text()
    after = (SAMPLES / "overload" / "after.prom").read_text()
    capture = json.loads((SAMPLES / "overload" / "capture.json").read_text())
    with anyio.fail_after(120):
        async with Client(_params()) as client:
            result = await client.call_tool("diagnose_metrics", {
                "metrics": [{"name": "before", "text": before}, {"name": "after", "text": after}],
                "window_s": capture["window_s"]})
    assert not result.is_error, result.content
    text = result.content[0].text  # type: ignore[union-attr]
    assert len(text) <= SUMMARY_BUDGET and not text.lstrip().startswith("{")
    data = result.structured_content or {}
    assert data.get("verdict") and data["verdict"].split()[0] in text  # the verdict leads the summary too
    assert len(json.dumps(data)) > len(text)  # the detail is in the structured content, not the text
