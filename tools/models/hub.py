"""Fetch config.json (and the safetensors index for the real checkpoint size) from a Hugging Face-style hub.

The token (HF_TOKEN) is sent as a bearer header and never logged or echoed; responses are cached on disk so
that offline mode can reuse them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import httpx

from vllm_tune.tools.errors import BadInputError, TargetError

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")


def default_cache_dir() -> Path:
    return Path(os.environ.get("VLLM_TUNE_HF_CACHE") or Path.home() / ".cache" / "vllm-tune" / "hf")


def hub_endpoint(endpoint: str | None = None) -> str:
    return (endpoint or os.environ.get("VLLM_TUNE_HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline_requested(offline: bool) -> bool:
    return offline or any(os.environ.get(v, "").strip() in ("1", "true", "yes")
                          for v in ("VLLM_TUNE_OFFLINE", "HF_HUB_OFFLINE"))


def looks_like_repo_id(spec: str) -> bool:
    return bool(_REPO_ID.match(spec)) and ".." not in spec


def _cache_path(cache_dir: Path, repo_id: str, revision: str, filename: str) -> Path:
    safe_rev = hashlib.sha256(revision.encode()).hexdigest()[:16]
    return cache_dir / repo_id.replace("/", "--") / safe_rev / filename


def _get_json(client: httpx.Client, url: str, *, repo_id: str, filename: str, required: bool) -> dict[str, Any] | None:
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        raise TargetError(f"cannot reach the model hub for {repo_id} ({type(exc).__name__})") from None
    if response.status_code in (401, 403):
        raise TargetError(f"the hub refused {repo_id}/{filename} (HTTP {response.status_code}); set HF_TOKEN "
                          "for gated models")
    if response.status_code == 404:
        if required:
            raise BadInputError(f"model {repo_id!r} has no {filename} on the hub (not found)")
        return None
    if response.status_code >= 400:
        raise TargetError(f"the hub answered HTTP {response.status_code} for {repo_id}/{filename}")
    try:
        data = response.json()
    except ValueError:
        raise TargetError(f"the hub returned something that is not JSON for {repo_id}/{filename}") from None
    if not isinstance(data, dict):
        raise TargetError(f"the hub returned a non-object for {repo_id}/{filename}")
    return data


def fetch_hub_files(repo_id: str, *, revision: str | None = None, offline: bool = False,
                    cache_dir: Path | None = None, endpoint: str | None = None,
                    timeout_s: float = 20.0) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(config.json, safetensors index or None) for a hub repo, from the on-disk cache or over HTTPS."""
    if not looks_like_repo_id(repo_id):
        raise BadInputError(f"{repo_id!r} is not a model id of the form owner/name")
    rev = revision or "main"
    if not _REVISION.match(rev) or ".." in rev:
        raise BadInputError(f"revision {rev!r} is not a valid branch, tag or commit")
    cache = cache_dir or default_cache_dir()
    files = {"config.json": True, "model.safetensors.index.json": False}
    cached: dict[str, dict[str, Any] | None] = {}
    for name in files:
        path = _cache_path(cache, repo_id, rev, name)
        if path.is_file():
            with contextlib.suppress(OSError, ValueError):
                cached[name] = json.loads(path.read_text(encoding="utf-8"))
        elif path.with_suffix(".missing").is_file():
            cached[name] = None
    cached_config = cached.get("config.json")
    if cached_config is not None and ("model.safetensors.index.json" in cached or offline_requested(offline)):
        return cached_config, cached.get("model.safetensors.index.json")
    if offline_requested(offline):
        raise BadInputError(f"model {repo_id!r} is not in the catalog or the local hub cache, and offline mode is on")
    headers = {"User-Agent": "vllm-tune"}
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    base = hub_endpoint(endpoint)
    results: dict[str, dict[str, Any] | None] = {}
    with httpx.Client(headers=headers, timeout=timeout_s, follow_redirects=True) as client:
        for name, required in files.items():
            url = f"{base}/{repo_id}/resolve/{rev}/{name}"
            log.info("fetching %s/%s@%s from %s", repo_id, name, rev, base)
            results[name] = _get_json(client, url, repo_id=repo_id, filename=name, required=required)
    for name, data in results.items():
        path = _cache_path(cache, repo_id, rev, name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if data is None:
                path.with_suffix(".missing").write_text("", encoding="utf-8")
            else:
                path.write_text(json.dumps(data), encoding="utf-8")
        except OSError as exc:
            log.warning("could not cache %s: %s", path, exc)
    config = results["config.json"]
    assert config is not None  # required=True raised otherwise
    return config, results["model.safetensors.index.json"]


def index_total_bytes(index: dict[str, Any] | None) -> int | None:
    """metadata.total_size of a safetensors index (the checkpoint's real weight bytes)."""
    if not index:
        return None
    meta = index.get("metadata")
    size = meta.get("total_size") if isinstance(meta, dict) else None
    if isinstance(size, (int, float)) and not isinstance(size, bool) and size > 0:
        return int(size)
    return None
