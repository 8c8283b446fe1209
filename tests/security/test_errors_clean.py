"""Inputs that used to end in 'unexpected failure' (exit 1) are bad input (exit 2) or an honest 'not comparable';
MCP tool failures nobody foresaw still reach the client with a one-line reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import BaseModel

from vllm_tune.cli.main import main
from vllm_tune.server.app import build_server
from vllm_tune.server.registry import add_model_tool
from vllm_tune.tools.compare.api import CompareInput, compare_runs

SAMPLE = Path(__file__).parents[1] / "unit" / "data" / "vllm_bench_serve_0.32_result.json"
HISTOGRAM = (
    "# TYPE vllm:time_to_first_token_seconds histogram\n"
    'vllm:time_to_first_token_seconds_bucket{le="abc",model_name="m"} 3\n'
    'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 3\n'
    'vllm:time_to_first_token_seconds_sum{model_name="m"} 0.3\n'
    'vllm:time_to_first_token_seconds_count{model_name="m"} 3\n'
)


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    captured = capsys.readouterr()
    assert "unexpected failure" not in captured.err, captured.err
    return code, captured.err + captured.out


def _result(tmp_path: Path, name: str, **changes: Any) -> Path:
    data = json.loads(SAMPLE.read_text())
    data.update(changes)
    path = tmp_path / name
    # json.dumps writes float('inf') as Infinity and nan as NaN, which Python's json reads back
    path.write_text(json.dumps(data))
    return path


def test_histogram_bucket_with_le_abc_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.prom", tmp_path / "b.prom"
    a.write_text(HISTOGRAM)
    b.write_text(HISTOGRAM)
    code, err = _cli(["diagnose", "--metrics-file", str(a), "--metrics-file", str(b), "--window", "10"], capsys)
    assert code == 2 and "le label is not a number" in err


def test_failed_infinity_in_a_result_is_no_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _result(tmp_path, "a.json")
    cand = _result(tmp_path, "b.json", failed=float("inf"))
    code, _ = _cli(["compare", str(base), str(cand)], capsys)
    assert code in (0, 2)


def test_p99_ttft_infinity_is_not_comparable_never_within_noise(tmp_path: Path) -> None:
    base = _result(tmp_path, "a.json")
    for bad in (float("inf"), float("nan")):
        cand = _result(tmp_path, "b.json", p99_ttft_ms=bad)
        out = compare_runs(CompareInput(runs=[str(base), str(cand)]))
        row = next(m for m in out.comparisons[0].metrics if m.key == "p99_ttft_ms")
        assert row.verdict == "not-comparable" and "finite" in (row.note or "")


def test_provenance_workload_that_is_not_a_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # strings, so that `"kind" in workload` holds on both sides and the old code indexed them
    base = _result(tmp_path, "a.json", provenance={"workload": "kind=random", "load": "arrival", "model": "m"})
    cand = _result(tmp_path, "b.json", provenance={"workload": "kind=sharegpt", "load": "arrival", "model": "m"})
    code, _ = _cli(["compare", str(base), str(cand)], capsys)
    assert code in (0, 2)


def test_non_utf8_yaml_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "serve.yaml"
    cfg.write_bytes(b"max-num-seqs: \xff\xfe 8\n")
    code, err = _cli(["lint", "--config", str(cfg), "--offline"], capsys)
    assert code == 2 and "not UTF-8" in err


@pytest.mark.parametrize("args", [["-tp", "0"], ["-dp", "0"]])
def test_zero_sizes_with_a_catalog_model_are_reported(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # lint exits 1 for critical problems: here the size vLLM refuses, named, not a ZeroDivisionError
    code, out = _cli(["lint", "--offline", "--json", "--", "vllm", "serve", "deepseek-r1", *args], capsys)
    assert code == 1
    assert {p["problem"] for p in json.loads(out)["option_problems"]} >= {"bad-value"}


def test_deeply_nested_yaml_and_json_are_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "deep.yaml"
    cfg.write_text("[" * 50_000 + "]" * 50_000)
    code, err = _cli(["lint", "--config", str(cfg), "--offline"], capsys)
    assert code == 2, err
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    code, err = _cli(["compare", str(deep), str(deep)], capsys)
    assert code == 2, err


@pytest.mark.parametrize("url", ["http://0177.0.0.1:9", "http://0177.0.0.01:9", "http://[::1:9"])
def test_octal_or_broken_url_hosts_are_bad_input(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(["diagnose", url, "--window", "1"], capsys)
    assert code == 2 and "not a valid URL" in err


class _In(BaseModel):
    what: str


class _Out(BaseModel):
    ok: bool


@pytest.mark.anyio
async def test_an_unforeseen_failure_reaches_the_client_with_a_reason() -> None:
    mcp: MCPServer[Any] = MCPServer(name="t")

    async def fail(request: _In, ctx: Context) -> _Out:
        if request.what == "memory":
            raise MemoryError
        if request.what == "disk":
            raise PermissionError(13, "Permission denied", "/results/run/result.json")
        raise ValueError("invalid literal for int(): 'root:$6$secret-hash'")

    add_model_tool(mcp, name="fail", title="t", description="t", input_model=_In, output_model=_Out, run=fail,
                   annotations=ToolAnnotations())
    async with Client(mcp) as client:
        texts = {}
        for what in ("memory", "disk", "other"):
            result = await client.call_tool("fail", {"what": what})
            assert result.is_error
            texts[what] = result.content[0].text  # type: ignore[union-attr]
    assert "out of memory" in texts["memory"]
    assert "Permission denied: /results/run/result.json" in texts["disk"]
    assert "internal error (ValueError)" in texts["other"] and "secret-hash" not in texts["other"]


@pytest.mark.anyio
async def test_an_unwritable_results_directory_gives_its_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    async with Client(build_server()) as client:
        result = await client.call_tool("tune_start", {
            "command": "vllm serve org/m --max-num-seqs 8", "goal": "throughput", "save_result": str(blocker),
            "workload": {"concurrency": 2, "num_prompts": 10}})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.strip() != "Error executing tool tune_start" and "not-a-dir" in text, text
