"""Start and stop a local `vllm serve` for one tuning trial.

Acting on the machine is kept narrow: the command must be a `vllm serve` line; it runs without a shell, bound
to 127.0.0.1 on a free port whatever --host/--port it named; its output goes to a log file with every secret
value replaced; start-up is bounded by a timeout and a cancel flag, and any failure stops the process before
the error is raised. The server runs in a session of its own led by a small watchdog (watchdog.py), so
stopping the group stops every process vLLM spawned, and the group ends when vllm-tune dies, even by SIGKILL.

What stands for `vllm` is resolved once from vllm-tune's own environment, never the session's: --vllm-cmd,
else $VLLM_TUNE_VLLM_CMD (e.g. a venv's python and a CLI shim), else `vllm` on PATH.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets as secrets_mod
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx

from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.net.http import SecretRedactor
from vllm_tune.tools.tune.processes import TAG_ENV, ProcessId, identify

ENV_VLLM_CMD = "VLLM_TUNE_VLLM_CMD"
REDACTED = "<redacted>"
WATCHDOG = Path(__file__).with_name("watchdog.py")
_DROPPED = ("--host", "--port")
_SECRET_FLAGS = ("--api-key", "--hf-token")
_TOKEN_ENVS = ("HF_TOKEN", "VLLM_API_KEY", "HUGGING_FACE_HUB_TOKEN")
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)


class LaunchError(TargetError):
    """vLLM could not be run at all (not found, not executable): the trial's command is not to blame."""


def vllm_command(explicit: str | None = None) -> list[str]:
    """argv that stands for `vllm`: `explicit` (--vllm-cmd), else $VLLM_TUNE_VLLM_CMD, else `vllm` on PATH.

    The program is resolved to an absolute path here, from vllm-tune's own PATH, so nothing a session's
    environment says can change which binary runs."""
    text = (explicit or "").strip() or os.environ.get(ENV_VLLM_CMD, "").strip()
    try:
        words = shlex.split(text) if text else ["vllm"]
    except ValueError as exc:
        raise LaunchError(f"cannot split the vllm command {text!r}: {exc}") from None
    found = shutil.which(words[0]) if os.sep not in words[0] else (words[0] if os.access(words[0], os.X_OK)
                                                                   else None)
    if found is None:
        where = f"{words[0]!r} (from --vllm-cmd or {ENV_VLLM_CMD})" if text else "`vllm` on PATH"
        raise LaunchError(f"cannot find {where}: pass --vllm-cmd, set {ENV_VLLM_CMD} (e.g. "
                          "'/venv/bin/python -m vllm.entrypoints.cli.main') or put vllm on PATH")
    return [os.path.abspath(found), *words[1:]]


def command_env(command: str) -> dict[str, str]:
    """The NAME=value assignments in front of `vllm serve`: they are meant for the server, so it gets them."""
    try:
        words = shlex.split(command.replace("\\\n", " "))
    except ValueError:
        return {}
    out: dict[str, str] = {}
    for word in words:
        if not _ENV_ASSIGNMENT.fullmatch(word):
            break
        name, _, value = word.partition("=")
        out[name] = value
    return out


def serve_argv(command: str, port: int) -> list[str]:
    """['serve', MODEL, flags...] of a `vllm serve` line, with --host/--port forced to 127.0.0.1:port."""
    try:
        words = shlex.split(command.replace("\\\n", " "))
    except ValueError as exc:
        raise BadInputError(f"cannot split the trial command: {exc}") from None
    # Only env assignments may precede `vllm`: anything else (sudo, docker, a wrapper) would run a
    # program we were not asked to run.
    start = 0
    while start < len(words) and _ENV_ASSIGNMENT.fullmatch(words[start]):
        start += 1
    if start + 1 >= len(words) or Path(words[start]).name != "vllm" or words[start + 1] != "serve":
        raise BadInputError("a trial command must be a `vllm serve MODEL ...` line (NAME=value prefixes allowed)")
    args = words[start + 2:]
    out: list[str] = []
    skip = False
    for i, word in enumerate(args):
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0].replace("_", "-")
        if name in _DROPPED:
            skip = "=" not in word and i + 1 < len(args)
            continue
        out.append(word)
    has_positional = bool(out) and not out[0].startswith("-")
    if not has_positional and "--model" not in [w.split("=", 1)[0] for w in out]:
        raise BadInputError("the trial command names no model (`vllm serve MODEL ...`)")
    return ["serve", *out, "--host", "127.0.0.1", "--port", str(port)]


def _secret_values(argv: list[str], env: dict[str, str], extra: list[str]) -> list[str]:
    values = list(extra)
    for i, word in enumerate(argv):
        name, eq, attached = word.partition("=")
        if name in _SECRET_FLAGS:
            if eq:
                values.append(attached)
                continue
            # --api-key takes several keys (nargs="+" in vLLM 0.32): every word up to the next flag is one.
            for following in argv[i + 1:]:
                if following.startswith("-"):
                    break
                values.append(following)
    values += [env.get(k) or os.environ.get(k, "") for k in _TOKEN_ENVS]
    return [v for v in values if v]


def _hide(redact: SecretRedactor, text: str) -> str:
    # SecretRedactor marks secrets with '***'; the tuning records promise the clearer '<redacted>'.
    return redact(text).replace("***", REDACTED)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


class LaunchedServer:
    """A `vllm serve` started by start_server; stop() ends its whole process group.

    `pid` is the group's leader (the watchdog, whose pid is the group id); `leader` and `tag` let a later
    vllm-tune process recognise the group (tools/tune/processes.py)."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path, command: list[str],
                 redact: SecretRedactor, pump: threading.Thread, tag: str, grace_s: float) -> None:
        self._proc, self._redact, self._pump, self._grace_s = proc, redact, pump, grace_s
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.pid = proc.pid
        self.leader: ProcessId = identify(proc.pid)
        self.tag = tag
        self.log_path = log_path
        self.command = command
        self._stop_lock = threading.Lock()

    def alive(self) -> bool:
        return self._proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return _hide(self._redact, "\n".join(text.splitlines()[-lines:]))

    def stop(self, grace_s: float | None = None) -> None:
        """SIGTERM the server, SIGKILL what is left of its group after the grace time; safe to call again."""
        grace = self._grace_s if grace_s is None else grace_s
        with self._stop_lock:
            if self._proc.poll() is None:
                # The watchdog passes SIGTERM to vllm serve and then ends the rest of the group itself;
                # signalling the whole group too would hand vLLM a second SIGTERM, which it takes as "exit now".
                with contextlib.suppress(ProcessLookupError):
                    self._proc.send_signal(signal.SIGTERM)
            else:
                # The leader is gone but vLLM's engine-core or API-server children can outlive it and
                # would keep the port and memory.
                _signal_group(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace + 5.0
            while time.monotonic() < deadline:
                self._proc.poll()
                if not _group_alive(self.pid):
                    break
                time.sleep(0.1)
            else:
                _signal_group(self.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
            self._pump.join(timeout=5)


def _copy_redacted(stream: IO[bytes], log: IO[str], redact: SecretRedactor) -> None:
    try:
        for raw in iter(stream.readline, b""):
            log.write(_hide(redact, raw.decode("utf-8", errors="replace")))
            log.flush()
    finally:
        log.close()
        stream.close()


# "(EngineCore pid=14894) ERROR 12-04 18:37:40 [core.py:1510] " in front of every line a vLLM process logs
_LOG_PREFIX = re.compile(r"^(?:\([A-Za-z_]+(?:[ _][A-Za-z0-9_]+)* pid=\d+\)\s*)?"
                         r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+"
                         r"\[[^\]]*\]\s*)?")
_NOISE = re.compile(r"^(Traceback|File \"|\^+$|~+$|During handling|The above exception)")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Failure): \S")
_ARGPARSE = re.compile(r"^(?:[\w.-]+: )?error: \S")
# Messages that only point elsewhere; the line they point at is the reason.
_WRAPPERS = ("See root cause above", "Engine core initialization failed", "Frontend process failed",
             "EngineCore failed to start", "Process EngineCore")


def first_error_line(log_text: str) -> str:
    """The line that says why vllm serve did not start: an argparse error, else the first exception that is
    not a wrapper pointing at another one, else the last line of output."""
    lines = [_LOG_PREFIX.sub("", ln).strip() for ln in log_text.splitlines()]
    lines = [ln for ln in lines if ln and not _NOISE.match(ln)]
    for pattern in (_ARGPARSE, _EXCEPTION):
        for line in lines:
            if pattern.match(line) and not any(w in line for w in _WRAPPERS):
                return line[:300]
    for line in reversed(lines):
        if "error" in line.lower() and not any(w in line for w in _WRAPPERS):
            return line[-300:]
    return lines[-1][-300:] if lines else "no output"


def start_server(command: str, *, env: dict[str, str], log_dir: Path, start_timeout_s: float = 600.0,
                 cancel: threading.Event | None = None, secrets: list[str] | None = None,
                 vllm_cmd: str | None = None, tag: str | None = None,
                 on_spawn: Callable[[LaunchedServer], None] | None = None,
                 stop_grace_s: float = 15.0) -> LaunchedServer:
    """Start the trial's `vllm serve` on a free loopback port and return once GET /health answers 200.

    `on_spawn` is called as soon as the process exists (before it is healthy), so the caller can record it.
    Raises LaunchError when vllm cannot be run at all, TargetError when it exits first, is not ready within
    `start_timeout_s` or `cancel` is set; the process group is stopped on every failure."""
    port = _free_port()
    argv = [*vllm_command(vllm_cmd), *serve_argv(command, port)]
    redact = SecretRedactor(_secret_values(argv, env, list(secrets or [])))
    shown = [_hide(redact, word) for word in argv]
    tag = tag or secrets_mod.token_hex(8)
    log_dir.mkdir(parents=True, exist_ok=True)
    # A unique name: a later trial may get the same port and must not overwrite this log.
    fd, name = tempfile.mkstemp(prefix=f"vllm-{port}-", suffix=".log", dir=log_dir)
    log_path = Path(name)
    log = os.fdopen(fd, "w", encoding="utf-8")
    # -I: the watchdog imports nothing from PYTHONPATH or the user's site; it needs only the standard library.
    leader = [sys.executable, "-I", str(WATCHDOG), str(os.getpid()), f"{stop_grace_s:g}", "--", *argv]
    try:
        proc = subprocess.Popen(leader, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env, **command_env(command), TAG_ENV: tag},
                                start_new_session=True)
    except OSError as exc:
        log.close()
        raise LaunchError(f"cannot start the trial server's watchdog: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    pump = threading.Thread(target=_copy_redacted, args=(proc.stdout, log, redact), daemon=True,
                            name=f"vllm-log-{port}")
    pump.start()
    server = LaunchedServer(proc, port, log_path, shown, redact, pump, tag, stop_grace_s)
    ready = False
    try:
        if on_spawn is not None:
            on_spawn(server)
        deadline = time.monotonic() + start_timeout_s
        # trust_env=False: a proxy from the environment must never see (or break) loopback health checks.
        with httpx.Client(timeout=2.0, trust_env=False, follow_redirects=False) as client:
            while True:
                if proc.poll() is not None:
                    pump.join(timeout=5)
                    raise TargetError(f"vllm serve exited with code {proc.returncode} during start-up: "
                                      f"{first_error_line(server.log_tail(400))} (full log: {log_path})")
                if cancel is not None and cancel.is_set():
                    raise TargetError(f"cancelled while vllm serve was starting (log: {log_path})")
                try:
                    if client.get(f"{server.url}/health").status_code == 200:
                        ready = True
                        return server
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TargetError(f"vllm serve was not ready after {start_timeout_s:g} s; stopped it "
                                      f"(log: {log_path})")
                if cancel is not None:
                    cancel.wait(0.5)
                else:
                    time.sleep(0.5)
    finally:
        if not ready:
            server.stop()
