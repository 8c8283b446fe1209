"""Signals raised as exceptions in the main thread, like Ctrl-C, so that a command's own clean-up runs."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sys import UnraisableHookArgs


@contextlib.contextmanager
def raising_on(signals: tuple[signal.Signals, ...], make: Callable[[int], BaseException], *,
               once: bool) -> Iterator[None]:
    """While inside, each of `signals` raises `make(signum)` in the main thread. once: the first one is raised and
    the rest ignored (a second signal while a server is being stopped must not cut that short)."""
    def handler(signum: int, frame: FrameType | None) -> None:
        if once:
            for sig in signals:
                signal.signal(sig, signal.SIG_IGN)
        exc = make(signum)
        raised.append((exc, signum))
        raise exc

    def redeliver(unraisable: UnraisableHookArgs) -> None:
        # The signal came while the main thread ran code whose exceptions Python reports and drops (a weakref
        # callback inside an import, a __del__): the exception never reached the command, which went on (with the
        # signal ignored, if once; seen in CI). Send it again from another thread, so that it lands after that
        # code (sent from here, in the main thread, it would be dropped again; dropped again anyway, it comes back).
        ours = next((signum for exc, signum in raised if exc is unraisable.exc_value), None)
        if ours is None:
            previous_hook(unraisable)
            return
        signal.signal(ours, handler)
        threading.Timer(0.01, resend, (ours,)).start()

    def resend(signum: int) -> None:
        # A real signal to the main thread, which also wakes it from a blocking system call; not once the command
        # has left this block and the previous handlers are back.
        main = threading.main_thread().ident
        if active and main is not None:
            signal.pthread_kill(main, signum)

    active = True
    raised: list[tuple[BaseException, int]] = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = redeliver
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        active = False
        for sig, old in previous.items():
            signal.signal(sig, old)
        sys.unraisablehook = previous_hook
