"""Identify a vLLM server: version, served models and their max_model_len."""

from __future__ import annotations

import json

import httpx
from pydantic import BaseModel

from vllm_tune.tools.errors import TargetError
from vllm_tune.tools.net.http import fetch_text


class ServedModel(BaseModel):
    id: str
    max_model_len: int | None = None
    root: str | None = None


class VllmServerInfo(BaseModel):
    base_url: str
    version: str | None
    models: list[ServedModel]


def probe_vllm(client: httpx.Client, base_url: str) -> VllmServerInfo:
    """Read /version and /v1/models; raise TargetError if the target does not look like vLLM."""
    version: str | None = None
    try:
        body = json.loads(fetch_text(client, f"{base_url}/version", what="version"))
        version = str(body["version"]) if isinstance(body, dict) and "version" in body else None
    except (TargetError, ValueError):
        version = None
    try:
        listing = json.loads(fetch_text(client, f"{base_url}/v1/models", what="model list"))
        models = [ServedModel(id=str(m["id"]), max_model_len=m.get("max_model_len"), root=m.get("root"))
                  for m in listing.get("data", []) if isinstance(m, dict) and "id" in m]
    except (TargetError, ValueError, AttributeError):
        models = []
    if version is None and not models:
        raise TargetError(f"{base_url} does not look like a vLLM server (no /version and no /v1/models)")
    return VllmServerInfo(base_url=base_url, version=version, models=models)
