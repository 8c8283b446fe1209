"""Issue 18, high: a `vllm-tune tune run` killed by SIGTERM or SIGKILL must leave nothing of its trial server
behind. Real vLLM CPU server (it forks an EngineCore and a resource tracker of its own); the killed process is a
real `vllm-tune` CLI; asserted: every process of the server's group is gone within a bound and the port is free."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.tiny_models import TinyModels, ensure_tiny_models
from support.vllm_env import VLLM_CLI, ComponentMissingError, ensure_vllm_python
from support.vllm_server import BASE_ENV

from vllm_tune.tools.tune.processes import group_members

pytestmark = pytest.mark.integration

GONE_WITHIN_S = 45.0  # the watchdog gives vllm serve 15 s to stop on SIGTERM, then kills what is left


@pytest.fixture(scope="module")
def models() -> TinyModels:
    try:
        ensure_vllm_python(install=False)
        return ensure_tiny_models(build=False)
    except ComponentMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def cli_env() -> Iterator[dict[str, str]]:
    python = ensure_vllm_python(install=False)
    yield {**os.environ, "VLLM_TUNE_VLLM_CMD": shlex.join([str(python), str(VLLM_CLI)])}


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_tune.cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def _start_session(model: Path, tmp_path: Path, env: dict[str, str]) -> tuple[str, Path]:
    envs = [f"--env={k}={v}" for k, v in BASE_ENV.items()]
    # Long enough a benchmark that the kill lands while the server is busy.
    out = _cli(["tune", "start", "--command", f"vllm serve {model} --enforce-eager --dtype bfloat16 "
                "--max-model-len 1024 --max-num-seqs 2", "--concurrency", "2", "--num-prompts", "400",
                "--input-len", "32", "--output-len", "64", *envs, "--save-result", str(tmp_path), "--json"],
               env, tmp_path)
    assert out.returncode == 0, out.stderr
    state = json.loads(out.stdout)
    return state["session_id"], Path(state["path"])


def _healthy_server(path: Path, proc: subprocess.Popen[str], timeout_s: float = 400.0) -> dict[str, Any]:
    """The session's server record once that server answers /health (EngineCore up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        server = json.loads(path.read_text())["server"]
        if server:
            try:
                if httpx.get(f"http://127.0.0.1:{server['port']}/health", timeout=2, trust_env=False).status_code \
                        == 200:
                    return dict(server)
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    raise AssertionError("the trial server did not become healthy")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _gone_within(pgid: int, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return []
        time.sleep(0.5)
    return group_members(pgid)


def _port_free(port: int) -> bool:
    """A new server could listen there: bound as servers bind (SO_REUSEADDR, as uvicorn does), so connections
    of the killed server still in TIME_WAIT do not count, while a live listener still does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_tune_run_leaves_no_server(models: TinyModels, tmp_path: Path, cli_env: dict[str, str],
                                          sig: signal.Signals) -> None:
    sid, path = _start_session(models.llama, tmp_path, cli_env)
    proc = subprocess.Popen([sys.executable, "-m", "vllm_tune.cli.main", "tune", "run", sid, "--yes",
                             "--start-timeout", "400", "--save-result", str(tmp_path)], env=cli_env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server = _healthy_server(path, proc)
        members = group_members(server["pgid"])
        assert any("EngineCore" in _cmdline(pid) for pid in members), [_cmdline(p) for p in members]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = _gone_within(server["pgid"], GONE_WITHIN_S)
    assert left == [], [_cmdline(p) for p in left]
    assert _port_free(server["port"])
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in err, err
        assert json.loads(path.read_text())["server"] is None
    status = _cli(["tune", "status", sid, "--save-result", str(tmp_path), "--json"], cli_env, tmp_path)
    assert status.returncode == 0, status.stderr
    state = json.loads(status.stdout)
    # Nothing runs for the session any more, and the interrupted baseline waits to be run again.
    assert state["server"] is None and state["trials"][0]["status"] == "proposed"
    assert state["state"] == "needs-measurement"
