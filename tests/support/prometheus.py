"""A real Prometheus server (Debian package `prometheus`) scraping given targets, for tests."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from .vllm_env import PROVISION_HINT, ComponentMissingError
from .vllm_server import free_port, stop_process_group, wait_ready

_live: set[PrometheusServer] = set()


def prometheus_binary() -> str | None:
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )


class PrometheusServer:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, workdir: Path) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.workdir = workdir
        self.log_path = workdir / "prometheus.log"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def query(self, promql: str) -> list[dict[str, Any]]:
        resp = httpx.get(self.url + "/api/v1/query", params={"query": promql}, timeout=5)
        resp.raise_for_status()
        body = resp.json()
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for_series(self, name: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Poll until the query `name` returns at least one series; return them."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                result = self.query(name)
                if result:
                    return result
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"Prometheus at {self.url} has no series {name!r} after {timeout_s:.0f} s")
            time.sleep(0.5)

    def stop(self) -> None:
        stop_process_group(self.proc)
        _live.discard(self)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _config(targets: list[str], scrape_interval_s: float, rule_files: list[Path] | None = None,
            evaluation_interval_s: float | None = None) -> str:
    hosts = ", ".join(f"'{t.removeprefix('http://').removeprefix('https://').rstrip('/')}'" for t in targets)
    rules = "".join(f"  - '{Path(f).resolve()}'\n" for f in rule_files or [])
    return (
        "global:\n"
        f"  scrape_interval: {scrape_interval_s}s\n"
        f"  evaluation_interval: {evaluation_interval_s or scrape_interval_s}s\n"
        + (f"rule_files:\n{rules}" if rules else "")
        + "scrape_configs:\n"
        "  - job_name: vllm\n"
        f"    static_configs:\n      - targets: [{hosts}]\n"
    )


def start_prometheus(targets: list[str], scrape_interval_s: float = 1, timeout_s: float = 60,
                     rule_files: list[Path] | None = None,
                     evaluation_interval_s: float | None = None) -> PrometheusServer:
    """Start Prometheus on a free loopback port scraping `targets` (URLs or host:port), evaluating
    `rule_files` (alerting or recording rules) every `evaluation_interval_s` (default: the scrape interval)."""
    binary = prometheus_binary()
    if binary is None:
        raise ComponentMissingError(f"prometheus binary not found; {PROVISION_HINT}")
    workdir = Path(tempfile.mkdtemp(prefix="vllm-tune-prom-"))
    (workdir / "prometheus.yml").write_text(_config(targets, scrape_interval_s, rule_files, evaluation_interval_s))
    port = free_port()
    cmd = [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with open(workdir / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = PrometheusServer(proc, port, workdir)
    _live.add(server)
    try:
        wait_ready(proc, server.url + "/-/ready", timeout_s, "prometheus", lambda: server.log_path.read_text()[-3000:])
    except BaseException:
        server.stop()
        raise
    return server


@atexit.register
def _stop_all() -> None:
    for server in list(_live):
        server.stop()
