"""Issue 18, items 4 and 8: a tuning session never stores or shows a secret typed into its command, and its env
cannot choose the program that runs (PATH, LD_PRELOAD, PYTHONPATH, VLLM_TUNE_VLLM_CMD), through the CLI, MCP or a
session file edited by hand."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from vllm_tune.server.app import build_server

SECRET = "sk-tune-secret-4242"
COMMANDS = [
    f"vllm serve org/m --max-num-seqs 4 --api-key {SECRET}",
    f"vllm serve org/m --max-num-seqs 4 --hf-token={SECRET}",
    f"VLLM_API_KEY={SECRET} vllm serve org/m --max-num-seqs 4",
    f"vllm serve org/m --max-num-seqs 4 --otlp-traces-endpoint https://svc:{SECRET}@collector:4317",
]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_tune.cli.main", *args], capture_output=True, text=True,
                          env=env or dict(os.environ), timeout=120)


def _files_holding(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_text(errors="replace")]


@pytest.mark.parametrize("command", COMMANDS)
def test_cli_refuses_a_secret_in_the_command_and_never_prints_or_stores_it(tmp_path: Path, command: str) -> None:
    out = _cli("tune", "start", "--command", command, "--concurrency", "2", "--save-result", str(tmp_path))
    assert out.returncode == 2
    assert SECRET not in out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "environment" in out.stderr
    assert _files_holding(tmp_path, SECRET) == [] and not (tmp_path / "tune").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("command", COMMANDS)
async def test_mcp_tune_start_refuses_it_too(tmp_path: Path, command: str) -> None:
    async with Client(build_server()) as client:
        res = await client.call_tool("tune_start", {"command": command, "workload": {"concurrency": 2},
                                                    "save_result": str(tmp_path)})
    assert res.is_error
    assert SECRET not in json.dumps([c.model_dump() for c in res.content])
    assert _files_holding(tmp_path, SECRET) == []


@pytest.fixture
def trap(tmp_path: Path) -> tuple[Path, Path]:
    """A directory holding a `vllm` that leaves a marker when run: what an attacker's PATH would point to."""
    bin_dir, marker = tmp_path / "evil-bin", tmp_path / "ran"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nsleep 30\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return bin_dir, marker


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "PYTHONPATH", "VLLM_TUNE_VLLM_CMD"])
def test_session_env_cannot_choose_the_program(tmp_path: Path, trap: tuple[Path, Path], name: str) -> None:
    bin_dir, _ = trap
    value = str(bin_dir / "vllm") if name == "VLLM_TUNE_VLLM_CMD" else str(bin_dir)
    out = _cli("tune", "start", "--command", "vllm serve org/m --max-num-seqs 4", "--concurrency", "2",
               "--env", f"{name}={value}", "--save-result", str(tmp_path))
    assert out.returncode == 2 and f"env {name} is not allowed" in out.stderr, out.stderr


@pytest.mark.anyio
async def test_mcp_tune_start_refuses_path_in_env(tmp_path: Path, trap: tuple[Path, Path]) -> None:
    async with Client(build_server()) as client:
        res = await client.call_tool("tune_start", {"command": "vllm serve org/m --max-num-seqs 4",
                                                    "workload": {"concurrency": 2}, "env": {"PATH": str(trap[0])},
                                                    "save_result": str(tmp_path)})
    assert res.is_error and "PATH is not allowed" in json.dumps([c.model_dump() for c in res.content])


def test_a_hand_edited_session_env_is_refused_before_anything_runs(tmp_path: Path, trap: tuple[Path, Path]) -> None:
    bin_dir, marker = trap
    started = _cli("tune", "start", "--command", "vllm serve org/m --max-num-seqs 4", "--concurrency", "2",
                   "--save-result", str(tmp_path), "--json")
    assert started.returncode == 0, started.stderr
    state = json.loads(started.stdout)
    path = Path(state["path"])
    edited = json.loads(path.read_text())
    edited["env"] = {"PATH": str(bin_dir)}
    path.write_text(json.dumps(edited))
    # vllm on the tool's own PATH is the trap too: only the refusal keeps it from running
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VLLM_TUNE_VLLM_CMD", None)
    out = _cli("tune", "run", state["session_id"], "--yes", "--save-result", str(tmp_path), env=env)
    assert out.returncode == 2 and "env PATH is not allowed" in out.stderr, out.stderr
    assert not marker.exists()
