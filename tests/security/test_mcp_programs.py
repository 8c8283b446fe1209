"""Over MCP a caller cannot make the server run a program of its choosing: tune_moe's vllm_python is the
operator's VLLM_TUNE_VLLM_PYTHON or nothing, and a results folder outside the file roots is refused."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from mcp import Client

from vllm_tune.server.app import build_server

pytestmark = pytest.mark.anyio


def _trap(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "ran"
    program = tmp_path / "python"
    program.write_text(f"#!/bin/sh\ntouch {marker}\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program, marker


async def test_a_callers_vllm_python_is_never_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    program, marker = _trap(tmp_path)
    monkeypatch.delenv("VLLM_TUNE_VLLM_PYTHON", raising=False)
    async with Client(build_server()) as client:
        out = await client.call_tool("tune_moe", {"model": "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpu": "H100",
                                                  "vllm_python": str(program), "offline": True})
    assert out.is_error and "VLLM_TUNE_VLLM_PYTHON" in str(out.content)
    assert not marker.exists()


async def test_the_operators_vllm_python_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    program, marker = _trap(tmp_path)
    monkeypatch.setenv("VLLM_TUNE_VLLM_PYTHON", str(program))
    async with Client(build_server()) as client:
        out = await client.call_tool("tune_moe", {"model": "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpu": "H100",
                                                  "offline": True})
    assert not out.is_error, out.content
    assert marker.exists()  # the operator's program ran, as the operator configured


async def test_a_results_folder_outside_the_roots_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inside = tmp_path / "roots"
    inside.mkdir()
    monkeypatch.setenv("VLLM_TUNE_FILE_ROOTS", str(inside))
    outside = tmp_path / "elsewhere"
    async with Client(build_server()) as client:
        out = await client.call_tool("tune_start", {"command": "vllm serve org/m --max-num-seqs 8",
                                                    "workload": {"concurrency": 2}, "save_result": str(outside)})
        assert out.is_error and "outside" in str(out.content).lower()
        assert not outside.exists()
        ok = await client.call_tool("tune_start", {"command": "vllm serve org/m --max-num-seqs 8",
                                                   "workload": {"concurrency": 2}, "save_result": str(inside)})
        assert not ok.is_error, ok.content
    assert any((inside / "tune").iterdir())
