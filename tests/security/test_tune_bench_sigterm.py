"""Issue 18, low item: `vllm-tune bench` stopped by SIGTERM (kill, systemd, docker stop) keeps the requests that
finished and marks the run cancelled, as Ctrl-C does, also when the signal reaches its load workers too (a
signal to the whole process group). Against the suite's streaming test server, through the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support_bench import StreamServer, start_stream_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[StreamServer]:
    # 40 tokens at 50 ms: each request takes about 2 s, so 200 of them take far longer than the test waits.
    with start_stream_server(10.0, 50.0) as srv:
        yield srv


def _status(root: Path) -> dict[str, Any] | None:
    found = list(root.glob("*/status.json"))
    if not found:
        return None
    try:
        return dict(json.loads(found[0].read_text()))
    except ValueError:
        return None  # caught between the write and the rename of another writer; read again


@pytest.mark.parametrize(("workers", "to_group"), [(1, False), (2, True)])
def test_sigterm_saves_the_partial_result(server: StreamServer, tmp_path: Path, workers: int,
                                          to_group: bool) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_tune.cli.main", "bench", server.url, "--concurrency", "4", "--num-prompts",
         "200", "--input-len", "8", "--output-len", "40", "--warmup", "0", "--workers", str(workers),
         "--result-dir", str(tmp_path), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status = _status(tmp_path)
            if status and status["state"] == "running" and status["done"] >= 8:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            raise AssertionError("the benchmark never got going")
        if to_group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "SIGTERM: stopping" in err and "Traceback" not in err
    final = _status(tmp_path)
    assert final is not None and final["state"] == "cancelled"
    printed = json.loads(out)
    assert printed["state"] == "cancelled" and printed["result_path"]
    result = json.loads(Path(printed["result_path"]).read_text())
    assert 8 <= result["completed"] < 200
