"""`vllm-tune plan` and the MCP tool recommend_parallelism share one engine and one output model."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from vllm_tune.cli.main import main
from vllm_tune.server.app import build_server


def test_cli_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "deepseek-r1", "--gpu", "H200", "--gpus", "8", "--goal", "throughput", "--top", "2",
                 "--offline"])
    out = capsys.readouterr().out
    assert code == 0
    assert "#1  TP1 DP8 EP8" in out
    assert "vllm serve deepseek-ai/DeepSeek-R1 --data-parallel-size 8 --enable-expert-parallel" in out
    assert "[distributed.ep-size-equals-tp-dp]" in out and "estimate @" in out and "not measurements" in out


def test_cli_json_and_slo(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--json", "--slo", "ttft=500,tpot=50",
                 "--isl", "512", "--osl", "128", "--concurrency", "16"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["feasible"] is True
    assert data["workload"]["slo_ttft_ms"] == 500 and data["workload"]["concurrency"] == 16
    first = data["candidates"][0]
    assert first["estimate"]["label"] == "estimate" and first["estimate"]["meets_slo"] is True
    assert {"tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel",
            "expert_parallel_size", "command", "env", "memory", "estimate", "reasons", "warnings"} <= set(first)


def test_cli_infeasible_is_an_answer_and_bad_input_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "llama-3.1-405b", "--gpu", "L40S", "--gpus", "2"]) == 0
    assert "what would fit" in capsys.readouterr().out
    assert main(["plan", "llama-3.1-8b", "--gpu", "nope", "--gpus", "2"]) == 2
    assert main(["plan", "llama-3.1-8b", "--gpu", "H100", "--gpus", "2", "--slo", "ttft=fast"]) == 2
    assert main(["plan", "llama-3.1-8b", "--gpu", "H100", "--gpus", "2", "--slo", "e2e=5"]) == 2
    assert main(["plan", "llama-3.1-8b", "--gpu", "H100", "--gpus", "0"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("vllm-tune: error:") == 4


@pytest.mark.anyio
async def test_mcp_tool_schema_and_call() -> None:
    async with Client(build_server(), raise_exceptions=True) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        tool = tools["recommend_parallelism"]
        assert {"model", "gpu", "gpus", "goal", "isl", "osl", "slo_ttft_ms", "verify_url",
                "options"} <= set(tool.input_schema["properties"])
        assert "estimator" in tool.input_schema["properties"]["options"]["description"]
        assert set(tool.input_schema["required"]) == {"model", "gpu", "gpus"}
        # verify_url sends a benchmark load, as run_benchmark does: not read-only, never destructive.
        assert tool.annotations is not None and tool.annotations.read_only_hint is False
        assert tool.annotations.idempotent_hint is False and tool.annotations.destructive_hint is False
        result = await client.call_tool("recommend_parallelism", {"model": "MiniMaxAI/MiniMax-M2", "gpu": "H200",
                                                                  "gpus": 8, "offline": True})
        assert not result.is_error and result.structured_content is not None
        data = result.structured_content
        assert data["feasible"] and any(r["rule"] == "pitfall.fp8-block-tp-cap" for r in data["rejected"])


@pytest.mark.anyio
async def test_mcp_bad_input_is_tool_error() -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("recommend_parallelism", {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 2,
                                                                  "concurrency": 3, "rate": 1.0})
        assert result.is_error
        unknown = await client.call_tool("recommend_parallelism", {"model": "x/y", "gpu": "H100", "gpus": 2,
                                                                   "offline": True})
        assert unknown.is_error


@pytest.mark.anyio
async def test_mcp_verify_url_unreachable_is_tool_error() -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("recommend_parallelism", {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 1,
                                                                  "offline": True, "concurrency": 2,
                                                                  "verify_url": "http://127.0.0.1:9"})
        assert result.is_error
        text = " ".join(getattr(c, "text", "") for c in result.content)
        assert "127.0.0.1:9" in text, text
