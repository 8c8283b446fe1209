"""Finding a trial server left behind by a dead vllm-tune process, on real processes: only a process proven to be
the recorded server (same group, the recorded tag in its environment, the leader's start time) is ever signalled."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_tune.tools.tune import servers
from vllm_tune.tools.tune.api import tune_report, tune_start, tune_status
from vllm_tune.tools.tune.models import SessionRef, TrialServer, TuneStartInput, TuneWorkload
from vllm_tune.tools.tune.processes import (
    TAG_ENV,
    ProcessId,
    boot_id,
    group_members,
    identify,
    server_processes,
    stop_server_processes,
)
from vllm_tune.tools.tune.session import load

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process identity reads /proc")

# A group like vLLM's: a leader that forks a child, both long-lived.
GROUP = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); " \
        "time.sleep(300)"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _group(tag: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != TAG_ENV}
    if tag:
        env[TAG_ENV] = tag
    proc = subprocess.Popen([sys.executable, "-c", GROUP], env=env, start_new_session=True)
    deadline = time.monotonic() + 20
    while len(group_members(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_members(proc.pid)) == 2
    return proc


@pytest.fixture
def groups() -> Iterator[list[subprocess.Popen[bytes]]]:
    made: list[subprocess.Popen[bytes]] = []
    yield made
    for proc in made:
        for pid in group_members(proc.pid):
            os.kill(pid, 9)
        proc.wait(timeout=10)


def test_a_tagged_group_is_found_and_stopped_whole(groups: list[subprocess.Popen[bytes]]) -> None:
    proc = _group("sess.0.abc")
    groups.append(proc)
    members = group_members(proc.pid)
    assert sorted(server_processes(proc.pid, "sess.0.abc", identify(proc.pid))) == sorted(members)
    assert sorted(stop_server_processes(proc.pid, "sess.0.abc", identify(proc.pid), grace_s=5)) == sorted(members)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in members) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in members)


def test_a_reused_pid_is_never_signalled(groups: list[subprocess.Popen[bytes]]) -> None:
    # The recorded ids now name a different program: another tag, or a leader that started at another time,
    # or a machine that rebooted since. Each is left running.
    other = _group("someone-else")
    untagged = _group(None)
    groups += [other, untagged]
    me = identify(other.pid)
    assert me.start_ticks is not None
    cases = [
        (other.pid, "sess.0.abc", me),
        (untagged.pid, "sess.0.abc", identify(untagged.pid)),
        (other.pid, "someone-else", ProcessId(other.pid, me.start_ticks + 1, me.boot_id)),
        (other.pid, "someone-else", ProcessId(other.pid, me.start_ticks, "another-boot")),
    ]
    for pgid, tag, leader in cases:
        assert server_processes(pgid, tag, leader) == []
        assert stop_server_processes(pgid, tag, leader, grace_s=1) == []
    time.sleep(0.3)
    assert all(_alive(pid) for pid in group_members(other.pid) + group_members(untagged.pid))
    assert len(group_members(other.pid)) == 2 and len(group_members(untagged.pid)) == 2


def test_members_outliving_their_leader_are_still_recognised(groups: list[subprocess.Popen[bytes]]) -> None:
    proc = _group("sess.1.def")
    groups.append(proc)
    leader = identify(proc.pid)
    child = next(p for p in group_members(proc.pid) if p != proc.pid)
    os.kill(proc.pid, 9)
    proc.wait(timeout=10)  # the pid is free; the child keeps the group alive, so the number cannot be reused
    assert server_processes(proc.pid, "sess.1.def", leader) == [child]
    assert stop_server_processes(proc.pid, "sess.1.def", leader, grace_s=5) == [child]
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _dead_process() -> ProcessId:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ident = identify(proc.pid)
    proc.kill()
    proc.wait()
    return ident


def _record(state_trial: int, server: subprocess.Popen[bytes], tag: str, owner: ProcessId) -> TrialServer:
    leader = identify(server.pid)
    return TrialServer(trial=state_trial, pgid=server.pid, leader_start_ticks=leader.start_ticks, boot_id=boot_id(),
                       tag=tag, port=1, log_path="/nonexistent.log", started_utc="2026-01-01T00:00:00Z",
                       owner_pid=owner.pid, owner_start_ticks=owner.start_ticks)


def test_the_next_command_stops_a_leftover_and_spares_a_live_trial(tmp_path: Path,
                                                                   groups: list[subprocess.Popen[bytes]]) -> None:
    state = tune_start(TuneStartInput(command="vllm serve org/m --max-num-seqs 4",
                                      workload=TuneWorkload(concurrency=2), save_result=str(tmp_path)))
    ref = SessionRef(session_id=state.session_id, save_result=str(tmp_path))
    from vllm_tune.tools.tune.session import save

    # Owner alive (this very process): a trial in progress somewhere, not a leftover.
    live = _group("sess.live")
    groups.append(live)
    state.server = _record(0, live, "sess.live", identify(os.getpid()))
    save(state)
    shown = tune_status(ref)
    assert shown.server is not None and len(group_members(live.pid)) == 2
    assert servers.describe(shown.server).startswith("trial 0's server: process group")

    # Owner dead: the group is stopped, the record cleared, the trial keeps waiting with a note saying so.
    left = _group("sess.left")
    groups.append(left)
    state.server = _record(0, left, "sess.left", _dead_process())
    save(state)
    members = group_members(left.pid)
    reported = tune_report(ref)  # read-only: shows the leftover, stops nothing
    assert reported.server is not None and reported.server.leftover and len(group_members(left.pid)) == 2
    assert "the next tune step" in servers.describe(reported.server)
    shown = tune_status(ref)
    assert shown.server is None and load(state.session_id, str(tmp_path)).server is None
    assert "outlived its vllm-tune process; stopped it (2 process(es))" in shown.trials[0].notes[-1]
    assert shown.trials[0].status == "proposed"
    left.wait(timeout=20)
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in members) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in members)
    assert len(group_members(live.pid)) == 2  # the live trial's server was never touched


def test_a_dead_owners_record_whose_pid_was_reused_stops_nothing(tmp_path: Path,
                                                                 groups: list[subprocess.Popen[bytes]]) -> None:
    state = tune_start(TuneStartInput(command="vllm serve org/m --max-num-seqs 4",
                                      workload=TuneWorkload(concurrency=2), save_result=str(tmp_path)))
    stranger = _group("not-the-session-tag")
    groups.append(stranger)
    # The record names the stranger's pid as its group but with the session's own tag: a reused number.
    state.server = _record(0, stranger, "sess.gone", _dead_process())
    from vllm_tune.tools.tune.session import save

    save(state)
    shown = tune_status(SessionRef(session_id=state.session_id, save_result=str(tmp_path)))
    assert shown.server is None
    assert not any("stopped it" in n for n in shown.trials[0].notes)
    assert len(group_members(stranger.pid)) == 2
