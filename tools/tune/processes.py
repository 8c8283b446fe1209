"""Finding a trial server again after the process that started it is gone, without ever hitting a reused pid.

A server is identified by three things recorded in the session when it starts: its process group id, the
group leader's start time (in clock ticks since boot, with the boot id), and a random tag that the launcher
puts in the environment of the leader, which every process vLLM forks inherits. A process counts as the
server's only when it is in that group *and* its environment carries the tag; a pid that now belongs to
some other program fails the tag check whatever its number. Signals go through a pidfd where the kernel has
them, so the process checked is the process signalled. Linux only (/proc); elsewhere nothing is found.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

TAG_ENV = "VLLMTUNE_TRIAL_TAG"  # not VLLM_*: vLLM warns about every unknown VLLM_ variable


@dataclass(frozen=True)
class ProcessId:
    """A process as it was when recorded: pid plus when it started, so a reused pid tells itself apart."""

    pid: int
    start_ticks: int | None
    boot_id: str | None


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (index 0 is the state), None when gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return None if not fields or fields[0] in ("Z", "X") else fields


def start_ticks(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[19]) if fields else None  # field 22 of stat(5), counted after the name


def identify(pid: int) -> ProcessId:
    return ProcessId(pid, start_ticks(pid), boot_id())


def is_same_process(recorded: ProcessId) -> bool:
    """True when `recorded.pid` is still the process that was recorded (same boot, same start time)."""
    if recorded.start_ticks is None:
        return False
    return boot_id() == recorded.boot_id and start_ticks(recorded.pid) == recorded.start_ticks


def has_tag(pid: int, tag: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False  # gone, or another user's process: not ours either way
    return f"{TAG_ENV}={tag}".encode() in environ.split(b"\0")


def group_members(pgid: int) -> list[int]:
    out = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                fields = _stat(int(entry.name))
                if fields and int(fields[2]) == pgid:
                    out.append(int(entry.name))
    return out


def server_processes(pgid: int, tag: str, leader: ProcessId) -> list[int]:
    """Live processes that are verifiably the recorded server's; [] when it is gone or the ids were reused."""
    if leader.boot_id != boot_id():
        return []  # a reboot since: every pid means something else now
    if _stat(leader.pid) is not None and not is_same_process(leader):
        return []  # the leader's pid belongs to a newer process: so does anything in a group of that number
    return [pid for pid in group_members(pgid) if has_tag(pid, tag)]


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _send(pid: int, fd: int | None, sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)


def stop_server_processes(pgid: int, tag: str, leader: ProcessId, grace_s: float = 15.0) -> list[int]:
    """SIGTERM every verified process of the server, SIGKILL those left after `grace_s`; returns their pids."""
    pids = server_processes(pgid, tag, leader)
    # Pin each process first, then check it once more: a pid freed between the scan and the pidfd fails here.
    pinned = [(pid, _pidfd(pid)) for pid in pids]
    pinned = [(pid, fd) for pid, fd in pinned if has_tag(pid, tag)]
    try:
        for pid, fd in pinned:
            _send(pid, fd, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_stat(pid) is not None for pid, _ in pinned):
            time.sleep(0.1)
        for pid, fd in pinned:
            if _stat(pid) is not None:
                _send(pid, fd, signal.SIGKILL)
    finally:
        for _, fd in pinned:
            if fd is not None:
                os.close(fd)
    return [pid for pid, _ in pinned]
