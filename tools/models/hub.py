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

from vllm_tune.tools.errors import BadInputError, TargetError, VllmTuneError
from vllm_tune.tools.models.config_parse import facts_from_config
from vllm_tune.tools.net.connect import DeadlineExceededError, ResponseTooLargeError, guarded_client
from vllm_tune.tools.net.http import SecretRedactor
from vllm_tune.tools.net.targets import ENV_ALLOWED, TargetPolicy

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
MAX_REDIRECTS = 5
# config.json is a few KB; the safetensors index of the largest checkpoints a few MB.
HUB_MAX_BYTES = 32 * 1024 * 1024


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


def _get_json(client: httpx.Client, url: str, *, repo_id: str, filename: str, required: bool,
              token: str | None) -> dict[str, Any] | None:
    """GET a JSON object, following at most MAX_REDIRECTS same-origin redirects (each hop checked)."""
    origin = httpx.URL(url)
    for _hop in range(MAX_REDIRECTS + 1):
        try:
            request = client.build_request("GET", url)
            if token and httpx.URL(url).netloc == origin.netloc and httpx.URL(url).scheme == origin.scheme:
                request.headers["Authorization"] = f"Bearer {token}"
            response = client.send(request)
        except httpx.HTTPError as exc:
            raise TargetError(f"cannot reach the model hub for {repo_id} ({_why(exc)})") from None
        if response.status_code not in (301, 302, 303, 307, 308):
            break
        location = response.headers.get("location", "")
        target = httpx.URL(url).join(location)
        if (target.scheme, target.netloc) != (origin.scheme, origin.netloc):
            # A redirect to another host (a CDN, or anywhere a hostile endpoint points): not followed, so
            # neither the token nor the policy's trust travels with it.
            raise TargetError(f"the hub redirects {repo_id}/{filename} to another host ({target.host}); "
                              "not following it")
        url = str(target)
    else:
        raise TargetError(f"the hub redirected {repo_id}/{filename} more than {MAX_REDIRECTS} times")
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


def _why(exc: httpx.HTTPError) -> str:
    if isinstance(exc, ResponseTooLargeError):
        return f"the answer is over {HUB_MAX_BYTES >> 20} MiB"
    if isinstance(exc, DeadlineExceededError):
        return "the answer took too long"
    return type(exc).__name__


def hub_policy(base: str) -> TargetPolicy:
    """The hub endpoint's host, plus the operator's allowlist: its addresses are checked like any target's
    (never cloud metadata or link-local through a name), and loopback only for a loopback endpoint."""
    host = (httpx.URL(base).host or "").lower()
    listed = [t.strip() for t in os.environ.get(ENV_ALLOWED, "").split(",") if t.strip()]
    return TargetPolicy.of([*listed, host], allow_loopback=TargetPolicy.of([]).is_loopback(base))


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
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    base = hub_endpoint(endpoint)
    if not base.startswith(("http://", "https://")):
        raise BadInputError(f"hub endpoint {base!r} must be an http(s) URL")
    results: dict[str, dict[str, Any] | None] = {}
    # The token is added per request, only for the endpoint's own origin; proxies only with
    # VLLM_TUNE_USE_PROXY=1 (tools/net/connect.py), as for every other request.
    with guarded_client(hub_policy(base), timeout=timeout_s, deadline_s=max(60.0, 3 * timeout_s),
                        max_bytes=HUB_MAX_BYTES, headers={"User-Agent": "vllm-tune"}) as client:
        for name, required in files.items():
            url = f"{base}/{repo_id}/resolve/{rev}/{name}"
            log.info("fetching %s/%s@%s from %s", repo_id, name, rev, base)
            try:
                results[name] = _get_json(client, url, repo_id=repo_id, filename=name, required=required,
                                          token=token)
            except VllmTuneError as exc:
                raise type(exc)(SecretRedactor([token] if token else None)(str(exc))) from None
    config = results["config.json"]
    assert config is not None  # required=True raised otherwise
    # Cached only once it reads as a model config: a wrong answer must not become the offline truth.
    facts_from_config(config, name=repo_id, source="hub")
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
