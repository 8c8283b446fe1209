"""The HTTP transport refuses a public bind without a token and enforces the bearer token."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from vllm_tune.server.app import build_server
from vllm_tune.server.http import build_http_app, is_loopback_host
from vllm_tune.tools.errors import BadInputError


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                                ("0.0.0.0", False), ("10.0.0.2", False), ("example.org", False)])
def test_is_loopback_host(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_public_bind_without_token_is_refused() -> None:
    with pytest.raises(BadInputError, match="without a token"):
        build_http_app(build_server(), "0.0.0.0", 8765, None)


def test_bearer_token_is_required_when_configured() -> None:
    app = build_http_app(build_server(), "0.0.0.0", 8765, "s3cret-token")
    with TestClient(app, base_url="http://0.0.0.0:8765") as client:
        denied = client.post("/mcp", json={})
        assert denied.status_code == 401
        wrong = client.post("/mcp", json={}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        allowed = client.post("/mcp", json={}, headers={"Authorization": "Bearer s3cret-token"})
        assert allowed.status_code != 401  # reaches the MCP transport, which judges the body


def _initialize(client: TestClient, host: str, auth: str = "Bearer s3cret-token") -> int:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}}
    response = client.post("/mcp", json=body, headers={"Authorization": auth, "Host": host,
                                                       "Accept": "application/json, text/event-stream"})
    return response.status_code


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_bearer_scheme_is_case_insensitive(scheme: str) -> None:
    app = build_http_app(build_server(), "127.0.0.1", 8765, "s3cret-token")
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        assert _initialize(client, "127.0.0.1:8765", f"{scheme} s3cret-token") == 200
        assert _initialize(client, "127.0.0.1:8765", f"{scheme} s3cret-tokeN") == 401
        assert _initialize(client, "127.0.0.1:8765", "Basic s3cret-token") == 401


def test_bind_all_accepts_the_machines_own_names_and_addresses() -> None:
    import socket

    from vllm_tune.server.http import machine_names

    names = machine_names()
    assert socket.gethostname() in names and "127.0.0.1" in names
    app = build_http_app(build_server(), "0.0.0.0", 8765, "s3cret-token")
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        assert _initialize(client, f"{socket.gethostname()}:8765") == 200
        for name in names:
            host = f"[{name}]" if ":" in name else name
            assert _initialize(client, f"{host}:8765") == 200, name
        assert _initialize(client, "0.0.0.0:8765") == 421
        assert _initialize(client, "evil.example:8765") == 421  # DNS rebinding protection still holds


def test_allowed_host_flag_adds_names() -> None:
    app = build_http_app(build_server(), "0.0.0.0", 8765, "s3cret-token", ["MCP.example.com", "proxy.example:443"])
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        assert _initialize(client, "mcp.example.com") == 200
        assert _initialize(client, "mcp.example.com:8765") == 200
        assert _initialize(client, "proxy.example:443") == 200
        assert _initialize(client, "proxy.example:8765") == 421


def test_bad_allowed_host_is_a_clean_error() -> None:
    with pytest.raises(BadInputError, match="allowed-host"):
        build_http_app(build_server(), "0.0.0.0", 8765, "t0ken", ["http://x/y"])
