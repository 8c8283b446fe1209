"""HTTP access to vLLM and Prometheus: clear errors, no redirects, no leaked keys, bounded reads."""

from __future__ import annotations

import os
import re

import httpx

from vllm_tune.tools.errors import TargetError
from vllm_tune.tools.net.connect import (
    DEFAULT_MAX_BYTES,
    DeadlineExceededError,
    ResponseTooLargeError,
    guarded_client,
)
from vllm_tune.tools.net.targets import TargetPolicy

API_KEY_ENVS = ("VLLM_TUNE_API_KEY", "VLLM_API_KEY", "OPENAI_API_KEY")
SECRET_ENVS = (*API_KEY_ENVS, "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_TUNE_MCP_TOKEN", "PROMETHEUS_BEARER_TOKEN")


def api_key() -> str | None:
    """The API key for vLLM's OpenAI server, from the environment (never from arguments or files)."""
    for name in API_KEY_ENVS:
        value = os.environ.get(name)
        if value:
            return value
    return None


class SecretRedactor:
    """Replaces every known secret value in text with '***' (keys from the environment)."""

    def __init__(self, extra: list[str] | None = None) -> None:
        values = [os.environ.get(n, "") for n in SECRET_ENVS] + list(extra or [])
        self._values = sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)
        self._bearer = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")

    def __call__(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, "***")
        return self._bearer.sub(r"\1***", text)


def _headers(with_key: bool) -> dict[str, str]:
    key = api_key() if with_key else None
    return {"Authorization": f"Bearer {key}"} if key else {}


def http_client(policy: TargetPolicy, *, timeout: float = 10.0, send_api_key: bool = True,
                max_connections: int = 10, max_bytes: int = DEFAULT_MAX_BYTES, deadline_s: float = 60.0,
                ) -> httpx.Client:
    """A client that reaches only `policy`'s targets, connecting to the addresses it checked, with every
    response capped at `max_bytes` while it streams in and each exchange held to `deadline_s` overall.
    No environment proxy unless VLLM_TUNE_USE_PROXY=1 (tools/net/connect.py)."""
    return guarded_client(policy, timeout=timeout, deadline_s=deadline_s, max_bytes=max_bytes,
                          headers=_headers(send_api_key), max_connections=max_connections)


def describe_http_error(url: str, exc: Exception) -> str:
    redact = SecretRedactor()
    if isinstance(exc, ResponseTooLargeError):
        return redact(f"cannot read {url}: {exc}; refusing to read more")
    if isinstance(exc, DeadlineExceededError):
        return redact(f"cannot read {url}: the answer took longer than the overall deadline")
    if isinstance(exc, httpx.ConnectError):
        return redact(f"cannot reach {url}: connection refused or host down")
    if isinstance(exc, httpx.TimeoutException):
        return redact(f"cannot reach {url}: timed out")
    return redact(f"cannot reach {url}: {type(exc).__name__}: {exc}")


def fetch_text(client: httpx.Client, url: str, *, what: str = "response") -> str:
    """GET `url` and return its body (bounded by the client's byte cap and deadline); any failure becomes one
    TargetError line."""
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        raise TargetError(describe_http_error(url, exc)) from None
    if response.status_code in (301, 302, 303, 307, 308):
        raise TargetError(f"{url} redirects to {response.headers.get('location', '?')}; not following redirects")
    if response.status_code == 401 or response.status_code == 403:
        raise TargetError(f"{url} refused the request (HTTP {response.status_code}); set VLLM_API_KEY if the "
                          "server uses --api-key")
    if response.status_code >= 400:
        raise TargetError(f"{url} answered HTTP {response.status_code} for the {what}")
    return response.text
