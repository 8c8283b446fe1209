"""Starting a trial's server: argv rewriting, secrets kept out of logs, bounded start-up, nothing left running."""

from __future__ import annotations

import os
import shlex
import sys
import threading
from pathlib import Path

import httpx
import pytest

from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.tune.launcher import ENV_VLLM_CMD, serve_argv, start_server

FAKE_VLLM = r'''
import http.server, sys
args = sys.argv[1:]
print("non-default args:", args, flush=True)
mode = args[args.index("--mode") + 1] if "--mode" in args else "ok"
if mode == "refuse":
    print("vllm: error: unrecognized arguments: --bogus-flag", flush=True)
    sys.exit(2)
if mode == "hang":
    import time
    time.sleep(600)
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
    "CUDA_VISIBLE_DEVICES=0 vllm serve org/m --port=8000 --host=0.0.0.0 -tp 2",
    "/opt/venv/bin/vllm serve org/m -tp 2 --port 9",
])
def test_host_and_port_are_always_loopback_and_ours(command: str) -> None:
    assert serve_argv(command, 4321) == ["serve", "org/m", "-tp", "2", "--host", "127.0.0.1", "--port", "4321"]


def test_only_vllm_serve_lines_with_a_model() -> None:
    with pytest.raises(BadInputError, match="vllm serve"):
        serve_argv("python -m http.server", 1)
    with pytest.raises(BadInputError, match="no model"):
        serve_argv("vllm serve --max-num-seqs 4", 1)
    assert serve_argv("vllm serve --model org/m", 1)[:3] == ["serve", "--model", "org/m"]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_started_server_answers_and_secrets_stay_out(fake_vllm: Path, tmp_path: Path) -> None:
    server = start_server("vllm serve org/m --api-key sk-do-not-log --port 80", env={"HF_TOKEN": "hf_do_not_log"},
                          log_dir=tmp_path / "logs", start_timeout_s=30)
    try:
        assert server.url.startswith("http://127.0.0.1:") and server.alive()
        assert httpx.get(server.url + "/health").status_code == 200
        assert "sk-do-not-log" not in " ".join(server.command) and "<redacted>" in server.command
    finally:
        server.stop()
    assert _gone(server.pid)
    log = server.log_path.read_text()
    assert "non-default args" in log and "sk-do-not-log" not in log
    server.stop()  # idempotent


def test_refused_start_names_the_error_line(fake_vllm: Path, tmp_path: Path) -> None:
    with pytest.raises(TargetError, match=r"exited with code 2.*unrecognized arguments: --bogus-flag"):
        start_server("vllm serve org/m --mode refuse", env={}, log_dir=tmp_path, start_timeout_s=30)


def test_timeout_and_cancel_stop_the_process(fake_vllm: Path, tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="not ready after 2 s"):
        start_server("vllm serve org/m --mode hang", env={}, log_dir=tmp_path / "a", start_timeout_s=2)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    with pytest.raises(TargetError, match="cancelled"):
        start_server("vllm serve org/m --mode hang", env={}, log_dir=tmp_path / "b", start_timeout_s=60,
                     cancel=cancel)
    out = os.popen("ps -eo args").read()
    assert str(fake_vllm) not in out


def test_missing_vllm_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VLLM_CMD, str(tmp_path / "no-such-vllm"))
    with pytest.raises(TargetError, match=ENV_VLLM_CMD):
        start_server("vllm serve org/m", env={}, log_dir=tmp_path, start_timeout_s=5)
