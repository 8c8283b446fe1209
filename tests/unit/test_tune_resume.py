"""A trial that was cancelled, or a baseline that did not start, stays proposed: the session goes on from it."""

from __future__ import annotations

import shlex
import sys
import threading
from pathlib import Path

import pytest

from vllm_tune.tools.tune.api import tune_next, tune_run_trial, tune_start
from vllm_tune.tools.tune.launcher import ENV_VLLM_CMD
from vllm_tune.tools.tune.models import RunTrialInput, SessionRef, TuneStartInput, TuneWorkload
from vllm_tune.tools.tune.processes import group_members

# Stands in for vllm: VLLM_FAKE_MODE=refuse fails like vLLM's engine core does, anything else never gets healthy.
FAKE = r'''
import os, sys, time
if os.environ.get("VLLM_FAKE_MODE") == "refuse":
    print("(EngineCore pid=1) ERROR 12-04 18:37:40 [core.py:1510] EngineCore failed to start.", flush=True)
    print("(EngineCore pid=1) ERROR 12-04 18:37:40 [core.py:1510] Traceback (most recent call last):", flush=True)
    print("(EngineCore pid=1) ERROR 12-04 18:37:40 [core.py:1510] ValueError: No available memory for the cache "
          "blocks.", flush=True)
    print("Traceback (most recent call last):", flush=True)
    print("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}", flush=True)
    sys.exit(1)
time.sleep(600)
'''


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE)
    monkeypatch.setenv(ENV_VLLM_CMD, shlex.join([sys.executable, str(script)]))


def _session(tmp_path: Path, mode: str) -> SessionRef:
    state = tune_start(TuneStartInput(command="vllm serve org/m --max-num-seqs 4", env={"VLLM_FAKE_MODE": mode},
                                      workload=TuneWorkload(concurrency=2), save_result=str(tmp_path)))
    return SessionRef(session_id=state.session_id, save_result=str(tmp_path))


def test_a_baseline_that_does_not_start_leaves_the_session_resumable(tmp_path: Path, fake: None) -> None:
    ref = _session(tmp_path, "refuse")
    run = RunTrialInput(session_id=ref.session_id, confirm=True, start_timeout_s=60, save_result=str(tmp_path))
    state = tune_run_trial(run)
    base = state.trial(0)
    assert base.status == "proposed" and state.state == "needs-measurement" and state.server is None
    # the reason is the root cause, not the wrapper pointing at it
    assert "ValueError: No available memory for the cache blocks" in base.notes[-1]
    assert "See root cause above" not in base.notes[-1]
    assert "run it again" in state.next_step
    assert tune_next(ref).state == "needs-measurement"  # not "done": nothing ended the session
    assert tune_run_trial(run).trial(0).status == "proposed"  # and it can be run again


def test_a_cancelled_trial_stays_proposed_and_its_server_is_stopped(tmp_path: Path, fake: None) -> None:
    ref = _session(tmp_path, "hang")
    cancel = threading.Event()
    seen: list[int] = []

    def cancel_once_running() -> None:
        from vllm_tune.tools.tune.session import load

        while not cancel.is_set():
            server = load(ref.session_id, str(tmp_path)).server
            if server is not None and group_members(server.pgid):
                seen.append(server.pgid)
                cancel.set()
            cancel.wait(0.1)

    watcher = threading.Thread(target=cancel_once_running)
    watcher.start()
    state = tune_run_trial(RunTrialInput(session_id=ref.session_id, confirm=True, start_timeout_s=60,
                                         save_result=str(tmp_path)), cancel=cancel)
    watcher.join(timeout=30)
    assert seen and group_members(seen[0]) == []
    trial = state.trial(0)
    assert trial.status == "proposed" and "cancelled while its server was starting" in trial.notes[-1]
    assert state.server is None and state.state == "needs-measurement"
