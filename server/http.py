"""Streamable-HTTP transport with a loopback default and an optional bearer token.

A non-loopback bind exposes tools that can send load to servers, so it is refused unless a token
is configured (VLLM_TUNE_MCP_TOKEN); requests then need `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from vllm_tune.tools.errors import BadInputError


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BearerTokenMiddleware:
    """Reject every HTTP request that lacks the configured bearer token (constant-time compare)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            supplied = dict(scope.get("headers", [])).get(b"authorization", b"")
            if not hmac.compare_digest(supplied, self._expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token\n"})
                return
        await self._app(scope, receive, send)


def build_http_app(mcp: MCPServer[Any], host: str, port: int, token: str | None) -> ASGIApp:
    if not is_loopback_host(host) and not token:
        raise BadInputError(
            f"refusing to serve MCP over HTTP on non-loopback host {host!r} without a token; "
            "set VLLM_TUNE_MCP_TOKEN or bind 127.0.0.1"
        )
    allowed_hosts = [f"{host}:{port}", host] + (
        [f"127.0.0.1:{port}", f"localhost:{port}", "127.0.0.1", "localhost"] if is_loopback_host(host) else []
    )
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts,
                                         allowed_origins=[f"http://{h}" for h in allowed_hosts])
    app: ASGIApp = mcp.streamable_http_app(transport_security=security, host=host)
    if token:
        app = BearerTokenMiddleware(app, token)
    return app


def run_http(mcp: MCPServer[Any], host: str, port: int, token: str | None) -> None:
    import uvicorn

    app = build_http_app(mcp, host, port, token)
    uvicorn.run(app, host=host, port=port, log_level="warning")
