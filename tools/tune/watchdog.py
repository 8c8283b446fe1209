"""Leader of a trial server's process group: runs `vllm serve` as its child and ends the whole group when
the vllm-tune process that started it dies, even by SIGKILL.

Run as a script with only the standard library (`python -I watchdog.py OWNER_PID GRACE_S -- ARGV...`), so it
starts fast and nothing from the session's environment is imported. Why a process rather than
PR_SET_PDEATHSIG on `vllm serve` alone: the death signal fires when the *thread* that forked dies (an MCP
worker thread may end while the server should live), and it reaches only the direct child, while `vllm serve`
forks an EngineCore and a resource tracker of its own that would stay behind.

Lifecycle: SIGTERM (from LaunchedServer.stop) is passed to `vllm serve`; whenever `vllm serve` ends, what is
left of the group gets SIGTERM and, after GRACE_S, SIGKILL; the exit code is `vllm serve`'s.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from types import FrameType

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.25


class _OwnerGone(Exception):
    pass


def _set_death_signal(sig: int) -> None:
    """prctl(PR_SET_PDEATHSIG, sig) for the calling process; Linux only, silently absent elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def _others_in_group() -> list[int] | None:
    """Live processes of our group other than us (None where /proc is not there to tell)."""
    if not os.path.isdir("/proc/self"):
        return None
    me, group, out = os.getpid(), os.getpgrp(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            out.append(int(name))
    return out


def _end_group(grace_s: float) -> None:
    """SIGTERM what is left of our group, SIGKILL it after grace_s (never ourselves: our exit code matters)."""
    others = _others_in_group()
    if others is None:
        with contextlib.suppress(OSError):
            os.killpg(os.getpgrp(), signal.SIGTERM)  # our own handler ignores it
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in others:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while others and time.monotonic() < deadline:
            time.sleep(0.1)
            others = _others_in_group() or []
        if not others:
            return


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: watchdog.py OWNER_PID GRACE_S -- ARGV...", file=sys.stderr)
        return 2
    owner, grace_s, command = int(argv[0]), float(argv[1]), argv[3:]
    if owner != os.getppid():
        return 1  # the owner died before we got going: start nothing
    requested = [False]

    def on_term(signum: int, frame: FrameType | None) -> None:
        requested[0] = True  # passed on by the loop below, once

    def on_owner_death(signum: int, frame: FrameType | None) -> None:
        # The death signal also fires when only the forking thread ends; the owner process may live on.
        if os.getppid() != owner:
            raise _OwnerGone

    # Handlers (not SIG_IGN) so that `vllm serve` does not inherit an ignored SIGTERM across exec.
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, on_owner_death)
    _set_death_signal(signal.SIGUSR1)
    if os.getppid() != owner:
        return 1
    try:
        # Single-threaded here, so preexec_fn is safe: should this watchdog be SIGKILLed, vllm serve gets SIGTERM.
        child = subprocess.Popen(command, preexec_fn=lambda: _set_death_signal(signal.SIGTERM))
    except OSError as exc:
        print(f"cannot start {command[0]}: {exc.strerror or exc}", flush=True)
        return 127
    try:
        term_at: float | None = None
        while child.poll() is None:
            if os.getppid() != owner:
                raise _OwnerGone
            if requested[0] and term_at is None:
                term_at = time.monotonic()
                with contextlib.suppress(OSError):
                    child.send_signal(signal.SIGTERM)
            if term_at is not None and time.monotonic() - term_at > grace_s:
                break  # vllm serve ignored SIGTERM: _end_group below kills the lot
            time.sleep(_POLL_S)
    except _OwnerGone:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        with contextlib.suppress(OSError):
            child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    _end_group(grace_s)
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
