"""Start and stop a local `vllm serve` for one tuning trial.

Acting on the machine is kept narrow: the command must be a `vllm serve` line; it runs without a shell, in a
session of its own (so stopping it stops every process vLLM spawned), bound to 127.0.0.1 on a free port
whatever --host/--port it named; its output goes to a log file with every secret value replaced; start-up is
bounded by a timeout and a cancel flag, and any failure stops the process before the error is raised.
`VLLM_TUNE_VLLM_CMD` says what stands for `vllm` (e.g. a venv's python and a CLI shim).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

import httpx

from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.net.http import SecretRedactor

ENV_VLLM_CMD = "VLLM_TUNE_VLLM_CMD"
REDACTED = "<redacted>"
_DROPPED = ("--host", "--port")
_SECRET_FLAGS = ("--api-key", "--hf-token")
_TOKEN_ENVS = ("HF_TOKEN", "VLLM_API_KEY", "HUGGING_FACE_HUB_TOKEN")
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)


def launcher_prefix() -> list[str]:
    """argv that stands for `vllm`: shlex.split($VLLM_TUNE_VLLM_CMD) when set, else ['vllm']."""
    text = os.environ.get(ENV_VLLM_CMD, "").strip()
    return shlex.split(text) if text else ["vllm"]


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
            values.append(attached if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
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
    """A `vllm serve` started by start_server; stop() ends its whole process group."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path, command: list[str],
                 redact: SecretRedactor, pump: threading.Thread) -> None:
        self._proc, self._redact, self._pump = proc, redact, pump
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.pid = proc.pid
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

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after `grace_s`; safe to call again."""
        with self._stop_lock:
            # The group is signalled even when the leader has exited: vLLM's engine-core or API-server
            # children can outlive it and would keep the port and memory.
            _signal_group(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
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


_NOISE = re.compile(r"^(Traceback|\s*File \"|\^+$|~+$|During handling)")


def _last_error_line(tail: str) -> str:
    """The line most likely to say why start-up failed (an argparse or exception line), else the last one."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip() and not _NOISE.match(ln.strip())]
    for line in reversed(lines):
        if "error" in line.lower():
            return line[-300:]
    return lines[-1][-300:] if lines else "no output"


def start_server(command: str, *, env: dict[str, str], log_dir: Path, start_timeout_s: float = 600.0,
                 cancel: threading.Event | None = None, secrets: list[str] | None = None) -> LaunchedServer:
    """Start the trial's `vllm serve` on a free loopback port and return once GET /health answers 200.

    Raises TargetError when it exits first, is not ready within `start_timeout_s` or `cancel` is set;
    the process group is stopped on every failure."""
    port = _free_port()
    argv = [*launcher_prefix(), *serve_argv(command, port)]
    redact = SecretRedactor(_secret_values(argv, env, list(secrets or [])))
    shown = [_hide(redact, word) for word in argv]
    log_dir.mkdir(parents=True, exist_ok=True)
    # A unique name: a later trial may get the same port and must not overwrite this log.
    fd, name = tempfile.mkstemp(prefix=f"vllm-{port}-", suffix=".log", dir=log_dir)
    log_path = Path(name)
    log = os.fdopen(fd, "w", encoding="utf-8")
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env}, start_new_session=True)
    except OSError as exc:
        log.close()
        raise TargetError(f"cannot start {shown[0]}: {exc.strerror or exc} (set {ENV_VLLM_CMD} to the command "
                          "that runs vllm)") from None
    assert proc.stdout is not None
    pump = threading.Thread(target=_copy_redacted, args=(proc.stdout, log, redact), daemon=True,
                            name=f"vllm-log-{port}")
    pump.start()
    server = LaunchedServer(proc, port, log_path, shown, redact, pump)
    ready = False
    try:
        deadline = time.monotonic() + start_timeout_s
        # trust_env=False: a proxy from the environment must never see (or break) loopback health checks.
        with httpx.Client(timeout=2.0, trust_env=False, follow_redirects=False) as client:
            while True:
                if proc.poll() is not None:
                    pump.join(timeout=5)
                    raise TargetError(f"vllm serve exited with code {proc.returncode} during start-up: "
                                      f"{_last_error_line(server.log_tail(200))} (full log: {log_path})")
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
