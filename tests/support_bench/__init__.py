"""Deterministic streaming test server for the benchmark client (see stream_server.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

SERVER = Path(__file__).with_name("stream_server.py")


@dataclass
class StreamServer:
    url: str
    port: int
    pids: list[int]
    proc: subprocess.Popen[str]

    def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(f"{self.url}/debug/stats", timeout=5).json()
        return data

    def cpu_seconds(self) -> float:
        """CPU used by every server process so far (from /proc)."""
        total = 0.0
        tick = os.sysconf("SC_CLK_TCK")
        for pid in self.pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick
        return total


@contextmanager
def start_stream_server(ttft_ms: float = 50.0, itl_ms: float = 10.0, *, procs: int = 1, api_key: str | None = None,
                        model: str = "test-model", keep_bodies: bool = False,
                        python: str = sys.executable) -> Iterator[StreamServer]:
    cmd = [python, str(SERVER), "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms), "--procs", str(procs),
           "--model", model]
    if api_key:
        cmd += ["--api-key", api_key]
    if keep_bodies:
        cmd.append("--keep-bodies")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("stream test server did not start")
        info = json.loads(line)
        port = int(info["port"])
        yield StreamServer(f"http://127.0.0.1:{port}", port, list(info["pids"]), proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
