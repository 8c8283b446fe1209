"""The trial server recorded in a session: written when it starts, cleared when it stops, and checked by every
later command on the session, which stops a server whose vllm-tune process died (and only that server)."""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.tune.launcher import LaunchedServer
from vllm_tune.tools.tune.models import TrialServer, TuneState
from vllm_tune.tools.tune.processes import ProcessId, boot_id, identify, is_same_process, stop_server_processes


def record_of(server: LaunchedServer, trial: int) -> TrialServer:
    me = identify(os.getpid())
    return TrialServer(trial=trial, pgid=server.pid, leader_start_ticks=server.leader.start_ticks,
                       boot_id=server.leader.boot_id or boot_id(), tag=server.tag, port=server.port,
                       log_path=str(server.log_path), started_utc=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       owner_pid=me.pid, owner_start_ticks=me.start_ticks)


def owner_alive(rec: TrialServer) -> bool:
    return is_same_process(ProcessId(rec.owner_pid, rec.owner_start_ticks, rec.boot_id))


def describe(rec: TrialServer) -> str:
    text = (f"trial {rec.trial}'s server: process group {rec.pgid}, port {rec.port}, since {rec.started_utc}, "
            f"started by vllm-tune pid {rec.owner_pid} (log: {rec.log_path})")
    if rec.leftover:
        text += "; that process has ended: the next tune step (or `vllm-tune tune status`) stops the server"
    return text


def reconcile(state: TuneState, *, stop: bool = True) -> bool:
    """Stop the recorded server when the process that started it is gone; True when `state` changed.

    A server whose owner still runs is left alone (a trial in progress, maybe in another terminal or the MCP
    server). Only processes proven to be that server are signalled (tools/tune/processes.py). With
    stop=False (a read-only report) a leftover is only marked as such."""
    rec = state.server
    if rec is None or owner_alive(rec):
        return False
    if not stop:
        rec.leftover = True
        return False
    leader = ProcessId(rec.pgid, rec.leader_start_ticks, rec.boot_id)
    stopped = stop_server_processes(rec.pgid, rec.tag, leader)
    if stopped:
        note = (f"{describe(rec)} outlived its vllm-tune process; stopped it ({len(stopped)} process(es)) "
                f"at {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}")
        with contextlib.suppress(KeyError):
            state.trial(rec.trial).notes.append(note)
    state.server = None
    return True


def refuse_if_running(state: TuneState) -> None:
    if state.server is not None:
        raise BadInputError(f"a trial is already running for this session: {describe(state.server)}; wait for it "
                            "or stop that vllm-tune process first")
