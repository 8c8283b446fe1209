"""Start and stop a local `vllm serve` for one tuning trial.

Acting on the machine is kept narrow: the command must be a `vllm serve` line; it runs without a shell, in a
session of its own (so stopping it stops every process vLLM spawned), bound to 127.0.0.1 on a free port
whatever --host/--port it named; its output goes to a log file with every secret value replaced; start-up is
bounded by a timeout and a cancel flag, and any failure stops the process before the error is raised.
`VLLM_TUNE_VLLM_CMD` says what stands for `vllm` (e.g. a venv's python and a CLI shim).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

import httpx

from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.net.http import SecretRedactor

ENV_VLLM_CMD = "VLLM_TUNE_VLLM_CMD"
_DROPPED = ("--host", "--port")
_SECRET_FLAGS = ("--api-key", "--hf-token")
_TOKEN_ENVS = ("HF_TOKEN", "VLLM_API_KEY", "HUGGING_FACE_HUB_TOKEN")


def launcher_prefix() -> list[str]:
    text = os.environ.get(ENV_VLLM_CMD, "").strip()
    return shlex.split(text) if text else ["vllm"]


def serve_argv(command: str, port: int) -> list[str]:
    """['serve', MODEL, flags...] of a `vllm serve` line, with --host/--port forced to 127.0.0.1:port."""
    try:
        words = shlex.split(command.replace("\\\n", " "))
    except ValueError as exc:
        raise BadInputError(f"cannot split the command: {exc}") from None
    start = next((i for i in range(len(words) - 1) if Path(words[i]).name == "vllm" and words[i + 1] == "serve"),
                 None)
    if start is None:
        raise BadInputError("a trial command must be a `vllm serve MODEL ...` line")
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
    model = out[0] if out and not out[0].startswith("-") else None
    if model is None and "--model" not in [w.split("=", 1)[0] for w in out]:
        raise BadInputError("the trial command names no model")
    return ["serve", *out, "--host", "127.0.0.1", "--port", str(port)]


def _secret_values(argv: list[str], env: dict[str, str], extra: list[str]) -> list[str]:
    values = list(extra)
    for i, word in enumerate(argv):
        name, _, attached = word.partition("=")
        if name in _SECRET_FLAGS:
            values.append(attached or (argv[i + 1] if i + 1 < len(argv) else ""))
    values += [env.get(k) or os.environ.get(k, "") for k in _TOKEN_ENVS]
    return [v for v in values if v]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LaunchedServer:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path, command: list[str],
                 redact: SecretRedactor, pump: threading.Thread) -> None:
        self.proc, self.port, self.log_path, self.command = proc, port, log_path, command
        self.url = f"http://127.0.0.1:{port}"
        self.pid = proc.pid
        self._redact, self._pump = redact, pump

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return self._redact("\n".join(text.splitlines()[-lines:]))

    def stop(self, grace_s: float = 15.0) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        self._pump.join(timeout=5)


def _copy_redacted(stream: IO[bytes], log_path: Path, redact: SecretRedactor) -> None:
    with log_path.open("w", encoding="utf-8") as log:
        for raw in iter(stream.readline, b""):
            log.write(redact(raw.decode("utf-8", errors="replace")))
            log.flush()


def _last_error_line(tail: str) -> str:
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    for line in reversed(lines):
        if "error" in line.lower() or "Error" in line:
            return line[-300:]
    return lines[-1][-300:] if lines else "no output"


def start_server(command: str, *, env: dict[str, str], log_dir: Path, start_timeout_s: float = 600.0,
                 cancel: threading.Event | None = None, secrets: list[str] | None = None) -> LaunchedServer:
    port = _free_port()
    argv = [*launcher_prefix(), *serve_argv(command, port)]
    redact = SecretRedactor(_secret_values(argv, env, list(secrets or [])))
    shown = shlex.split(redact(shlex.join(argv)).replace("***", "<redacted>"))
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"vllm-{port}.log"
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env}, start_new_session=True)
    except OSError as exc:
        raise TargetError(f"cannot start {argv[0]}: {exc.strerror or exc} (set {ENV_VLLM_CMD} to the command "
                          "that runs vllm)") from None
    assert proc.stdout is not None
    pump = threading.Thread(target=_copy_redacted, args=(proc.stdout, log_path, redact), daemon=True)
    pump.start()
    server = LaunchedServer(proc, port, log_path, shown, redact, pump)
    ready = False
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                pump.join(timeout=5)
                raise TargetError(f"vllm serve exited with code {proc.returncode} during start-up: "
                                  f"{_last_error_line(server.log_tail())} (log: {log_path})")
            if cancel is not None and cancel.is_set():
                raise TargetError("cancelled while vllm serve was starting")
            try:
                if httpx.get(f"{server.url}/health", timeout=2.0).status_code == 200:
                    ready = True
                    return server
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TargetError(f"vllm serve was not ready after {start_timeout_s:.0f} s (log: {log_path})")
            time.sleep(0.5)
    finally:
        if not ready:
            server.stop()
