"""Where a result came from: server, model, serve flags, client host, tool version, seed, workload."""

from __future__ import annotations

import os
import platform
import socket
import sys
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field


class Provenance(BaseModel):
    server_url: str
    server_version: str | None = None
    model: str
    max_model_len: int | None = None
    serve_flags_from_metrics: dict[str, str] = Field(
        default_factory=dict, description="labels of vllm:cache_config_info (block size, KV blocks, ...)")
    serve_flags_from_caller: dict[str, str] = Field(default_factory=dict)
    client_host: str
    client_platform: str
    client_python: str
    client_cpus: int | None
    tool: str
    tool_version: str
    seed: int
    workload: dict[str, Any] = Field(default_factory=dict)
    load: dict[str, Any] = Field(default_factory=dict)
    started_utc: str
    finished_utc: str | None = None


def tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm-tune")
    except PackageNotFoundError:
        return "unknown"


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def collect(*, server_url: str, server_version: str | None, model: str, max_model_len: int | None,
            cache_config: dict[str, str], caller_flags: dict[str, str], seed: int, workload: dict[str, Any],
            load: dict[str, Any]) -> Provenance:
    return Provenance(
        server_url=server_url, server_version=server_version, model=model, max_model_len=max_model_len,
        serve_flags_from_metrics=cache_config, serve_flags_from_caller=caller_flags,
        client_host=socket.gethostname(), client_platform=platform.platform(),
        client_python=sys.version.split()[0], client_cpus=os.cpu_count(), tool="vllm-tune",
        tool_version=tool_version(), seed=seed, workload=workload, load=load, started_utc=utc_now())
