"""Which network targets vllm-tune may reach.

vLLM servers and Prometheus usually live on private addresses, so a blanket private-range block
(the usual SSRF defence) would make the tool useless. Instead the operator lists what is allowed:
loopback is allowed by default; anything else must match VLLM_TUNE_ALLOWED_TARGETS (comma
separated: host names, host:port, IP addresses or CIDR ranges) or an explicit per-call allowance.
Every resolved address of a host must pass, so a name cannot smuggle in an unlisted address.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from vllm_tune.tools.errors import BadInputError, TargetNotAllowedError

ENV_ALLOWED = "VLLM_TUNE_ALLOWED_TARGETS"


def normalize_base_url(url: str) -> str:
    """'localhost:8000' -> 'http://localhost:8000'; strips a trailing slash and a /metrics or /v1 suffix."""
    text = url.strip()
    if not text:
        raise BadInputError("empty target URL")
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        # httpx refuses some hosts urlsplit takes (an octal 0177.0.0.1): refuse them here, as bad input.
        httpx.URL(text)
    except (ValueError, httpx.InvalidURL) as exc:
        raise BadInputError(f"target {url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise BadInputError(f"target {url!r} must be an http(s) URL")
    if not parts.hostname:
        raise BadInputError(f"target {url!r} has no host")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise BadInputError(f"target {url!r} has an invalid port") from None
    path = parts.path.rstrip("/")
    for suffix in ("/metrics", "/v1"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    netloc = parts.netloc.rsplit("@", 1)[-1]  # credentials in URLs are dropped, never echoed
    return f"{parts.scheme}://{netloc}{path}"


def _resolve(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        return []
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


@dataclass(frozen=True)
class TargetPolicy:
    """The targets one call may reach."""

    allowed: tuple[str, ...] = ()
    allow_loopback: bool = True
    _networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(default=(), repr=False)

    @classmethod
    def from_env(cls, extra: tuple[str, ...] | list[str] = ()) -> TargetPolicy:
        listed = [t.strip() for t in os.environ.get(ENV_ALLOWED, "").split(",") if t.strip()]
        return cls.of([*listed, *extra])

    @classmethod
    def of(cls, entries: list[str] | tuple[str, ...], allow_loopback: bool = True) -> TargetPolicy:
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        names: list[str] = []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                names.append(entry.lower())
        return cls(allowed=tuple(names), allow_loopback=allow_loopback, _networks=tuple(networks))

    def with_target(self, url: str) -> TargetPolicy:
        """This policy plus one explicitly named target (e.g. a URL the operator typed on the CLI)."""
        parts = urlsplit(normalize_base_url(url))
        host = (parts.hostname or "").lower()
        return TargetPolicy.of([*self.allowed, *(str(n) for n in self._networks), f"{host}:{parts.port}"
                                if parts.port else host], self.allow_loopback)

    def is_loopback(self, url: str) -> bool:
        host = urlsplit(normalize_base_url(url)).hostname or ""
        addresses = _resolve(host)
        return bool(addresses) and all(a.is_loopback for a in addresses)

    def check(self, url: str) -> str:
        """Return the normalized base URL, or raise TargetNotAllowedError."""
        base = normalize_base_url(url)
        parts = urlsplit(base)
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if host in self.allowed or f"{host}:{port}" in self.allowed:
            return base
        addresses = _resolve(host)
        if not addresses:
            raise BadInputError(f"cannot resolve host {host!r}")

        def ok(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
            if self.allow_loopback and addr.is_loopback:
                return True
            return any(addr in net for net in self._networks) or str(addr) in self.allowed \
                or f"{addr}:{port}" in self.allowed

        if all(ok(a) for a in addresses):
            return base
        raise TargetNotAllowedError(
            f"target {host}:{port} is not allowed; only loopback is allowed by default. "
            f"Add it to {ENV_ALLOWED} (host, host:port or CIDR)"
        )
