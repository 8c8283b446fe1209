"""Target allowlist, URL normalization and secret redaction."""

from __future__ import annotations

import httpx
import pytest

from vllm_tune.tools.errors import BadInputError, TargetError, TargetNotAllowedError
from vllm_tune.tools.net import SecretRedactor, TargetPolicy, fetch_text, http_client, normalize_base_url


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("localhost:8000", "http://localhost:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/metrics", "http://127.0.0.1:8000"),
        ("https://vllm.internal/v1", "https://vllm.internal"),
        ("http://user:secret@127.0.0.1:8000", "http://127.0.0.1:8000"),
    ],
)
def test_normalize_base_url(raw: str, expected: str) -> None:
    assert normalize_base_url(raw) == expected


@pytest.mark.parametrize("raw", ["", "ftp://x:1", "http://", "http://h:notaport"])
def test_normalize_rejects_bad_urls(raw: str) -> None:
    with pytest.raises(BadInputError):
        normalize_base_url(raw)


def test_loopback_allowed_by_default_and_private_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_TUNE_ALLOWED_TARGETS", raising=False)
    policy = TargetPolicy.from_env()
    assert policy.check("127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert policy.check("http://[::1]:8000") == "http://[::1]:8000"
    with pytest.raises(TargetNotAllowedError, match="VLLM_TUNE_ALLOWED_TARGETS"):
        policy.check("http://10.1.2.3:8000")


def test_env_allowlist_cidr_and_host_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_TUNE_ALLOWED_TARGETS", "10.1.0.0/16, 192.168.5.7:9090")
    policy = TargetPolicy.from_env()
    assert policy.check("http://10.1.2.3:8000")
    assert policy.check("http://192.168.5.7:9090")
    with pytest.raises(TargetNotAllowedError):
        policy.check("http://192.168.5.7:8000")  # same host, other port
    with pytest.raises(TargetNotAllowedError):
        policy.check("http://10.2.0.1:8000")


def test_loopback_can_be_switched_off() -> None:
    with pytest.raises(TargetNotAllowedError):
        TargetPolicy.of([], allow_loopback=False).check("http://127.0.0.1:1")


def test_with_target_allows_exactly_that_target() -> None:
    policy = TargetPolicy.of([]).with_target("http://10.9.9.9:8000")
    assert policy.check("10.9.9.9:8000")
    with pytest.raises(TargetNotAllowedError):
        policy.check("10.9.9.9:8001")


def test_client_refuses_unlisted_target_per_request() -> None:
    with http_client(TargetPolicy.of([])) as client, pytest.raises(TargetNotAllowedError):
        client.get("http://10.0.0.1:1/metrics")


def test_unreachable_target_is_one_clear_error() -> None:
    with http_client(TargetPolicy.of([]), timeout=2) as client, pytest.raises(TargetError, match="cannot reach"):
        fetch_text(client, "http://127.0.0.1:9/metrics")  # port 9 (discard) is closed here


def test_redirects_are_not_followed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"location": "http://169.254.169.254/"})

    client = httpx.Client(transport=httpx.MockTransport(handler), follow_redirects=False)
    with pytest.raises(TargetError, match="not following redirects"):
        fetch_text(client, "http://127.0.0.1:8000/metrics")


def test_redactor_hides_env_secrets_and_bearer_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-very-secret-123")
    redact = SecretRedactor()
    text = redact("key=sk-very-secret-123 header Authorization: Bearer abc.def-ghi")
    assert "sk-very-secret-123" not in text
    assert "abc.def-ghi" not in text
    assert text.count("***") == 2


def test_with_target_ipv6_with_port_allows_exactly_that_target() -> None:
    policy = TargetPolicy.of([]).with_target("http://[fd00::1]:8000")
    assert policy.check("http://[fd00::1]:8000")
    with pytest.raises(TargetNotAllowedError):
        policy.check("http://[fd00::1]:8001")
    with pytest.raises(TargetNotAllowedError):
        policy.check("http://[fd00::1:8000]:80")  # the address the old entry text spelled


def test_idle_connections_expire_before_vllm_closes_them() -> None:
    # vLLM's API server closes a keep-alive connection after 5 s idle (VLLM_HTTP_TIMEOUT_KEEP_ALIVE): a pooled
    # connection kept as long can carry a request into the server's close, which then fails as a read error.
    from vllm_tune.tools.net.connect import async_guarded_client, guarded_client

    policy = TargetPolicy.from_env()
    sync, asyn = guarded_client(policy), async_guarded_client(policy)
    for client in (sync, asyn):
        pool = client._transport._direct._pool  # type: ignore[attr-defined]
        assert pool._keepalive_expiry < 5.0
    sync.close()
