"""`vllm-tune tune run` killed while its trial server runs: SIGTERM is handled like Ctrl-C, and even SIGKILL leaves
no process of the server's group behind (its watchdog ends the group). A stand-in for vllm that forks a child
and never gets healthy keeps these fast; tests/security/test_tune_orphans.py does the same on real vLLM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from vllm_tune.tools.tune.processes import group_members

# Stands in for `vllm serve`: forks a child in its group (as vLLM forks its EngineCore), never answers /health.
HANGING_VLLM = r'''
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("engine child", child.pid, flush=True)
time.sleep(600)
'''


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "vllm_tune.cli.main", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _session(tmp_path: Path) -> tuple[str, Path, dict[str, str]]:
    script = tmp_path / "hanging_vllm.py"
    script.write_text(HANGING_VLLM)
    env = {**os.environ, "VLLM_TUNE_VLLM_CMD": f"{sys.executable} {script}"}
    out = subprocess.run([sys.executable, "-m", "vllm_tune.cli.main", "tune", "start", "--command",
                          "vllm serve org/m --max-num-seqs 4", "--concurrency", "2", "--save-result",
                          str(tmp_path), "--json"], capture_output=True, text=True, env=env, check=True)
    state = json.loads(out.stdout)
    return state["session_id"], Path(state["path"]), env


def _wait_for_server(path: Path, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        server = json.loads(path.read_text())["server"]
        # the group holds the watchdog, the stand-in and its child once all three exist
        if server and len(group_members(server["pgid"])) >= 3:
            return dict(server)
        time.sleep(0.2)
    raise AssertionError("the trial server never showed up in the session")


def _group_gone_within(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_the_server_and_keep_the_trial(tmp_path: Path, sig: signal.Signals) -> None:
    sid, path, env = _session(tmp_path)
    proc = _cli("tune", "run", sid, "--yes", "--start-timeout", "120", "--save-result", str(tmp_path), cwd=tmp_path,
                env=env)
    try:
        server = _wait_for_server(path)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig
    assert f"stopped by {sig.name}" in err and "Traceback" not in err
    assert _group_gone_within(server["pgid"], 5)
    state = json.loads(path.read_text())
    assert state["server"] is None
    assert state["trials"][0]["status"] == "proposed" and "interrupted" in state["trials"][0]["notes"][-1]


def test_sigkill_of_vllm_tune_still_ends_the_whole_group(tmp_path: Path) -> None:
    sid, path, env = _session(tmp_path)
    proc = _cli("tune", "run", sid, "--yes", "--start-timeout", "120", "--save-result", str(tmp_path), cwd=tmp_path,
                env=env)
    try:
        server = _wait_for_server(path)
        members = group_members(server["pgid"])
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.kill()
    # The watchdog sees its owner die at once (death signal) or within a poll; the stand-in dies on SIGTERM.
    assert _group_gone_within(server["pgid"], 20), members
    # The record outlives the killed process; the next command on the session clears it, the trial waits.
    assert json.loads(path.read_text())["server"] is not None
    out = subprocess.run([sys.executable, "-m", "vllm_tune.cli.main", "tune", "status", sid, "--save-result",
                          str(tmp_path)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "running:" not in out.stdout and " 0 proposed" in out.stdout
    assert json.loads(path.read_text())["server"] is None


def test_sigterm_dropped_inside_a_weakref_callback_is_delivered_again() -> None:
    # CI once saw SIGTERM land while the main thread ran a weakref callback of the import machinery: Python
    # reports an exception raised there and drops it, and the run went on measuring with the signal ignored.
    import weakref

    from vllm_tune.cli.tune import Terminated, _terminate_like_interrupt

    class Thing:
        pass

    def callback(_ref: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):  # the handler runs here, inside the callback, and its exception is dropped
            pass

    before, hook_before = signal.getsignal(signal.SIGTERM), sys.unraisablehook
    with pytest.raises(Terminated) as caught, _terminate_like_interrupt():
        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing
        assert ref() is None
        t0 = time.monotonic()
        time.sleep(30)  # delivered again here, after 10 ms, waking the sleep
    assert time.monotonic() - t0 < 10
    assert caught.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before and sys.unraisablehook is hook_before
