"""The MCP server answers a real in-memory MCP client: tools, schemas, resources and prompts."""

from __future__ import annotations

import json

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from vllm_tune.server.app import build_server

pytestmark = pytest.mark.anyio


async def test_search_knowledge_returns_structured_hits() -> None:
    async with Client(build_server(), raise_exceptions=True) as client:
        result = await client.call_tool("search_knowledge", {"query": "preemptions kv cache thrash"})
        assert not result.is_error
        data = result.structured_content
        assert data is not None
        assert data["hits"][0]["id"] == "triage.preemption-kv-thrash"
        assert data["hits"][0]["uri"] == "kb://entries/triage.preemption-kv-thrash"


async def test_tool_schema_is_flat_and_annotated() -> None:
    async with Client(build_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        search = tools["search_knowledge"]
        assert set(search.input_schema["properties"]) == {"query", "kind", "vllm_version", "limit"}
        assert search.input_schema["required"] == ["query"]
        # Output schemas are not published (context budget); the structured content is still validated.
        assert search.output_schema is None
        assert "title" not in search.input_schema["properties"]["query"]
        assert search.annotations is not None
        assert search.annotations.read_only_hint is True
        assert search.annotations.open_world_hint is False


async def test_bad_arguments_are_a_tool_error_not_a_crash() -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("search_knowledge", {"query": "x", "limit": 0})
        assert result.is_error
        missing = await client.call_tool("get_knowledge_entry", {"id": "triage.no-such-rule"})
        assert missing.is_error
        assert "no knowledge entry" in missing.content[0].text  # type: ignore[union-attr]


async def test_entry_resource_and_index() -> None:
    async with Client(build_server(), raise_exceptions=True) as client:
        templates = (await client.list_resource_templates()).resource_templates
        assert any(t.uri_template == "kb://entries/{entry_id}" for t in templates)
        read = await client.read_resource("kb://entries/triage.ttft-high-queue-growing")
        text = read.contents[0].text  # type: ignore[union-attr]
        assert "TTFT is high and the waiting queue is growing" in text
        assert "## Sources" in text
        index = (await client.read_resource("kb://index")).contents[0].text  # type: ignore[union-attr]
        assert "`triage.preemption-kv-thrash`" in index and "`triage.itl-spikes-graph-miss`" in index
        assert "kb://index/flag" in index
        flags = (await client.read_resource("kb://index/flag")).contents[0].text  # type: ignore[union-attr]
        assert "`flag.max-num-seqs`" in flags and "triage." not in flags


async def test_unknown_resource_ids_are_a_clean_not_found() -> None:
    from mcp.shared.exceptions import MCPError

    async with Client(build_server()) as client:
        for uri in ("kb://entries/nope", "kb://index/nope"):
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            assert caught.value.error.code == -32602
            assert "nope" in caught.value.error.message


async def test_tool_text_is_a_summary_and_structured_content_is_whole() -> None:
    async with Client(build_server(), raise_exceptions=True) as client:
        result = await client.call_tool("search_knowledge", {"query": "preemptions kv cache thrash"})
        text = result.content[0].text  # type: ignore[union-attr]
        assert len(text) <= 3000
        assert not text.lstrip().startswith("{")  # not the JSON again
        assert "triage.preemption-kv-thrash" in text
        assert result.structured_content is not None and len(result.structured_content["hits"]) == 8


async def test_triage_prompts_exist() -> None:
    async with Client(build_server(), raise_exceptions=True) as client:
        names = {p.name for p in (await client.list_prompts()).prompts}
        assert {"why_is_ttft_high", "why_is_throughput_low", "tune_new_deployment"} <= names
        prompt = await client.get_prompt("why_is_ttft_high", {"target": "http://10.0.0.5:8000", "ttft_slo_ms": "500"})
        text = prompt.messages[0].content.text  # type: ignore[union-attr]
        assert "10.0.0.5:8000" in text and "500 ms" in text


async def test_fields_with_default_factories_become_flat_arguments() -> None:
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context
    from mcp.types import ToolAnnotations
    from pydantic import BaseModel, Field

    from vllm_tune.server.registry import add_model_tool

    class In(BaseModel):
        names: list[str] = Field(default_factory=lambda: ["a"], description="names to echo")
        count: int = 1

    class Out(BaseModel):
        echoed: list[str]

    async def run(request: In, ctx: Context) -> Out:
        return Out(echoed=request.names * request.count)

    server: MCPServer = MCPServer("t")
    add_model_tool(server, name="echo", title="Echo", description="echo names", input_model=In, output_model=Out,
                   run=run, annotations=ToolAnnotations(read_only_hint=True))
    async with Client(server, raise_exceptions=True) as client:
        schema = {t.name: t for t in (await client.list_tools()).tools}["echo"].input_schema
        assert schema["properties"]["names"]["default"] == ["a"]
        assert schema["properties"]["names"]["description"] == "names to echo"
        plain = await client.call_tool("echo", {"count": 2})
        assert plain.structured_content == {"echoed": ["a", "a"]}
        given = await client.call_tool("echo", {"names": ["x"]})
        assert given.structured_content == {"echoed": ["x"]}


async def test_advanced_settings_are_named_in_options_and_work_through_it() -> None:
    async with Client(build_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        plan = tools["recommend_parallelism"].input_schema
        assert "top" not in plan["properties"] and "offline" not in plan["properties"]
        assert "top" in plan["properties"]["options"]["description"]
        full = json.loads((await client.read_resource("vllm-tune://tools/recommend_parallelism"))
                          .contents[0].text)  # type: ignore[union-attr]
        assert full["properties"]["top"]["type"] == "integer"  # types and meanings one read away
        args = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "H100", "gpus": 8}
        via_options = await client.call_tool("recommend_parallelism", {**args, "options": {"top": 1, "offline": True}})
        assert not via_options.is_error, via_options.content
        assert len((via_options.structured_content or {})["candidates"]) == 1
        # the same setting still works as a plain argument, as before it moved into options
        plain = await client.call_tool("recommend_parallelism", {**args, "top": 2, "offline": True})
        assert len((plain.structured_content or {})["candidates"]) == 2
        wrong = await client.call_tool("recommend_parallelism", {**args, "options": {"tpo": 1}})
        assert wrong.is_error
        assert "options.tpo: not a setting of recommend_parallelism" in wrong.content[0].text  # type: ignore[union-attr]
        bad = await client.call_tool("recommend_parallelism", {**args, "options": {"top": 0, "offline": True}})
        assert bad.is_error and "top" in bad.content[0].text  # type: ignore[union-attr]
        with pytest.raises(MCPError, match="no tool"):
            await client.read_resource("vllm-tune://tools/nope")


async def test_hidden_settings_take_their_definitions_with_them() -> None:
    async with Client(build_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        diagnose = tools["diagnose_metrics"].input_schema
        assert "serve_flags" not in diagnose["properties"]
        assert "ServeFlags" not in diagnose.get("$defs", {})  # only serve_flags used it
        assert "MetricsText" in diagnose["$defs"]  # still used by `metrics`
