"""HTTP access to vLLM and Prometheus: clear errors, no redirects off the allowlist, no leaked keys."""

from __future__ import annotations

import os
import re

import httpx

from vllm_tune.tools.errors import TargetError
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
                max_connections: int = 10) -> httpx.Client:
    """A client that refuses requests to targets outside `policy` (checked per request)."""

    def guard(request: httpx.Request) -> None:
        policy.check(str(request.url))

    return httpx.Client(timeout=timeout, follow_redirects=False, headers=_headers(send_api_key),
                        limits=httpx.Limits(max_connections=max_connections), event_hooks={"request": [guard]})


def describe_http_error(url: str, exc: Exception) -> str:
    redact = SecretRedactor()
    if isinstance(exc, httpx.ConnectError):
        return redact(f"cannot reach {url}: connection refused or host down")
    if isinstance(exc, httpx.TimeoutException):
        return redact(f"cannot reach {url}: timed out")
    return redact(f"cannot reach {url}: {type(exc).__name__}: {exc}")


def fetch_text(client: httpx.Client, url: str, *, what: str = "response") -> str:
    """GET `url` and return its body; any failure becomes one TargetError line."""
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
