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
