"""Starting a trial's server: argv rewriting, secrets kept out of logs, bounded start-up, nothing left running."""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.tune.launcher import ENV_VLLM_CMD, LaunchedServer, serve_argv, start_server

# Stands in for `vllm`: prints its argv (as vLLM prints its non-default args, api key included), can spawn a
# child in its process group, refuse its flags like argparse, hang before getting healthy, or serve /health.
FAKE_VLLM = r'''
import http.server, subprocess, sys, time
args = sys.argv[1:]
print("non-default args:", args, flush=True)
mode = args[args.index("--mode") + 1] if "--mode" in args else "ok"
if mode == "refuse":
    print("usage: vllm serve [-h] MODEL", flush=True)
    print("vllm: error: unrecognized arguments: --bogus-flag", flush=True)
    sys.exit(2)
if mode == "hang":
    time.sleep(600)
if "--child-pid-file" in args:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(args[args.index("--child-pid-file") + 1], "w").write(str(child.pid))
port = int(args[args.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
http.server.HTTPServer((args[args.index("--host") + 1], port), H).serve_forever()
'''


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    monkeypatch.setenv(ENV_VLLM_CMD, shlex.join([sys.executable, str(script)]))
    return script


@pytest.mark.parametrize("command", [
    "vllm serve org/m --port 8000 --host 0.0.0.0 -tp 2",
    "CUDA_VISIBLE_DEVICES=0 VLLM_USE_V1=1 vllm serve org/m --port=8000 --host=0.0.0.0 -tp 2",
    "/opt/venv/bin/vllm serve org/m -tp 2 --port 9",
    "vllm serve \\\n  org/m \\\n  --host localhost -tp 2",
])
def test_host_and_port_are_always_loopback_and_ours(command: str) -> None:
    assert serve_argv(command, 4321) == ["serve", "org/m", "-tp", "2", "--host", "127.0.0.1", "--port", "4321"]


@pytest.mark.parametrize(("command", "message"), [
    ("python -m http.server", "vllm serve"),
    ("sudo vllm serve org/m", "vllm serve"),
    ("vllm bench serve --model org/m", "vllm serve"),
    ("vllm", "vllm serve"),
    ("vllm serve 'unclosed", "cannot split"),
    ("vllm serve --max-num-seqs 4", "no model"),
    ("vllm serve --port 8000", "no model"),
])
def test_only_vllm_serve_lines_with_a_model(command: str, message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        serve_argv(command, 1)


def test_model_may_be_given_as_a_flag() -> None:
    assert serve_argv("vllm serve --model org/m", 1)[:3] == ["serve", "--model", "org/m"]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers signal 0 until reaped; it no longer runs.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_started_server_answers_and_secrets_stay_out(fake_vllm: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    server = start_server(f"vllm serve org/m --api-key sk-do-not-log --port 80 --child-pid-file {pid_file}",
                          env={"HF_TOKEN": "hf_do_not_log"}, log_dir=tmp_path / "logs", start_timeout_s=30,
                          secrets=["extra-secret-value"])
    try:
        assert server.url == f"http://127.0.0.1:{server.port}" and server.port != 80 and server.alive()
        assert httpx.get(server.url + "/health", trust_env=False).status_code == 200
        assert "sk-do-not-log" not in " ".join(server.command) and "<redacted>" in server.command
        assert server.command[-4:] == ["--host", "127.0.0.1", "--port", str(server.port)]
        child = int(pid_file.read_text())
        assert not _gone(child)
    finally:
        server.stop(grace_s=5)
    assert _gone(server.pid) and _gone(child) and not server.alive()
    log = server.log_path.read_text()
    assert server.log_path.parent == tmp_path / "logs"
    assert "non-default args" in log and "sk-do-not-log" not in log and "<redacted>" in log
    assert "sk-do-not-log" not in server.log_tail() and "non-default args" in server.log_tail()
    server.stop()  # idempotent


def test_env_token_and_given_secrets_are_redacted(fake_vllm: Path, tmp_path: Path) -> None:
    server = start_server("vllm serve org/m --hf-token hf_do_not_log --note extra-secret-value", env={},
                          log_dir=tmp_path, start_timeout_s=30, secrets=["extra-secret-value"])
    server.stop(grace_s=5)
    log = server.log_path.read_text()
    assert "non-default args" in log
    assert "hf_do_not_log" not in log and "extra-secret-value" not in log
    assert "extra-secret-value" not in " ".join(server.command)


def test_refused_start_names_the_error_line(fake_vllm: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(TargetError) as info:
        start_server("vllm serve org/m --mode refuse --api-key sk-do-not-log", env={}, log_dir=tmp_path,
                     start_timeout_s=30)
    message = str(info.value)
    assert "exited with code 2" in message and "unrecognized arguments: --bogus-flag" in message
    assert "\n" not in message and "sk-do-not-log" not in message and str(tmp_path) in message
    assert time.monotonic() - t0 < 15


def test_timeout_and_cancel_stop_the_process(fake_vllm: Path, tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="not ready after 2 s"):
        start_server("vllm serve org/m --mode hang", env={}, log_dir=tmp_path / "a", start_timeout_s=2)
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(TargetError, match="cancelled"):
        start_server("vllm serve org/m --mode hang", env={}, log_dir=tmp_path / "b", start_timeout_s=60,
                     cancel=cancel)
    assert time.monotonic() - t0 < 20
    timer.join()
    out = os.popen("ps -eo args").read()
    assert str(fake_vllm) not in out


def test_missing_vllm_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VLLM_CMD, str(tmp_path / "no-such-vllm"))
    with pytest.raises(TargetError, match=ENV_VLLM_CMD):
        start_server("vllm serve org/m", env={}, log_dir=tmp_path, start_timeout_s=5)


def test_the_server_outlives_the_thread_that_started_it(fake_vllm: Path, tmp_path: Path) -> None:
    # The parent-death signal is tied to the forking *thread*: an MCP worker thread that ends must not take the
    # trial server with it while vllm-tune itself still runs.
    started: list[LaunchedServer] = []
    thread = threading.Thread(target=lambda: started.append(
        start_server("vllm serve org/m", env={}, log_dir=tmp_path, start_timeout_s=30)))
    thread.start()
    thread.join(timeout=60)
    server = started[0]
    try:
        time.sleep(1.5)  # several watchdog polls
        assert server.alive()
        assert httpx.get(server.url + "/health", trust_env=False).status_code == 200
    finally:
        server.stop(grace_s=5)
