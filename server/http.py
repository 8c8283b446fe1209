"""Streamable-HTTP transport with a loopback default and an optional bearer token.

A non-loopback bind exposes tools that can send load to servers, so it is refused unless a token
is configured (VLLM_TUNE_MCP_TOKEN); requests then need `Authorization: Bearer <token>` (the scheme
in any case, RFC 7235). The Host header of every request must name this server (DNS-rebinding
protection): the bind address, or, for a bind-all address (0.0.0.0, ::), the machine's own names and
interface addresses, plus every `--allowed-host` the operator gives (the name clients use through a
reverse proxy or DNS).
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import ipaddress
import socket
import struct
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from vllm_tune.tools.errors import BadInputError

_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address
BIND_ALL = ("0.0.0.0", "::", "")


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _interface_addresses() -> list[str]:
    """IPv4 and IPv6 addresses of this machine's interfaces (Linux; elsewhere what the host name gives)."""
    found: list[str] = []
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _index, name in socket.if_nameindex():
            with contextlib.suppress(OSError):
                packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
                found.append(socket.inet_ntoa(packed[20:24]))
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            raw = line.split()[0]
            found.append(str(ipaddress.IPv6Address(int(raw, 16))))
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP):
            found.append(str(info[4][0]).split("%")[0])
    return found


def machine_names() -> list[str]:
    """The names and addresses a client may use to reach this machine (for a bind-all address)."""
    names = ["localhost", socket.gethostname()]
    with contextlib.suppress(OSError):
        names.append(socket.getfqdn())
    names.extend(_interface_addresses())
    out: list[str] = []
    for name in names:
        try:
            if ipaddress.ip_address(name).is_link_local:
                continue  # fe80:: needs a zone in a URL; nobody types it in a Host header
        except ValueError:
            pass
        if name and name not in out:
            out.append(name)
    return out


def allowed_host_headers(host: str, port: int, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Every Host header value this server accepts."""
    bases = machine_names() if host in BIND_ALL else [host]
    if is_loopback_host(host):
        bases += ["127.0.0.1", "localhost", "::1"]
    out: list[str] = []

    def add(value: str) -> None:
        if value not in out:
            out.append(value)

    for name in bases:
        bare = f"[{name}]" if ":" in name else name
        add(f"{bare}:{port}")
        add(bare)
    for entry in extra:
        value = entry.strip().lower()
        if not value or "/" in value or " " in value:
            raise BadInputError(f"--allowed-host {entry!r}: expected a host name or address, optionally :port")
        with contextlib.suppress(ValueError):
            value = f"[{ipaddress.IPv6Address(value)}]"  # a bare IPv6 address, as it appears in a Host header
        add(value)
        if not _has_port(value):
            add(f"{value}:{port}")
    return out


def _has_port(value: str) -> bool:
    tail = value.rsplit("]", 1)[-1] if value.startswith("[") else value
    return ":" in tail


class BearerTokenMiddleware:
    """Reject every HTTP request that lacks the configured bearer token (constant-time compare)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = token.encode()

    def _authorized(self, header: bytes) -> bool:
        scheme, _, supplied = header.strip().partition(b" ")
        # hmac.compare_digest runs in time independent of where the values differ; the scheme check does
        # not depend on the secret.
        return hmac.compare_digest(supplied.strip(), self._expected) and scheme.lower() == b"bearer"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            supplied = dict(scope.get("headers", [])).get(b"authorization", b"")
            if not self._authorized(supplied):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token\n"})
                return
        await self._app(scope, receive, send)


def build_http_app(mcp: MCPServer[Any], host: str, port: int, token: str | None,
                   allowed_hosts: list[str] | tuple[str, ...] = ()) -> ASGIApp:
    if not is_loopback_host(host) and not token:
        raise BadInputError(
            f"refusing to serve MCP over HTTP on non-loopback host {host!r} without a token; "
            "set VLLM_TUNE_MCP_TOKEN or bind 127.0.0.1"
        )
    hosts = allowed_host_headers(host, port, allowed_hosts)
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)
    app: ASGIApp = mcp.streamable_http_app(transport_security=security, host=host)
    if token:
        app = BearerTokenMiddleware(app, token)
    return app


def run_http(mcp: MCPServer[Any], host: str, port: int, token: str | None,
             allowed_hosts: list[str] | tuple[str, ...] = ()) -> None:
    import uvicorn

    app = build_http_app(mcp, host, port, token, allowed_hosts)
    uvicorn.run(app, host=host, port=port, log_level="warning")
