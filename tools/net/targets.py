"""Which network targets vllm-tune may reach.

vLLM servers and Prometheus usually live on private addresses, so a blanket private-range block
(the usual SSRF defence) would make the tool useless. Instead the operator lists what is allowed:
loopback is allowed by default; anything else must match VLLM_TUNE_ALLOWED_TARGETS (comma
separated: host names, host:port, IP addresses or CIDR ranges) or an explicit per-call allowance.
Every resolved address of a host must pass, so a name cannot smuggle in an unlisted address; a listed
name vouches for ordinary addresses only (never cloud metadata or link-local), and connections go to the
address that was checked (tools/net/connect.py), so a DNS answer that changes after the check is never used.
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


Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Instance-metadata services hand out cloud credentials to whoever asks from the machine: AWS, GCP, Azure
# and OCI answer on 169.254.169.254, AWS also on fd00:ec2::254 (IPv6-only instances), Alibaba Cloud on
# 100.100.100.200. They, and link-local, unspecified and multicast addresses, are never reached through a
# name: only an allowlist entry that names the address (or a CIDR range holding it) lets them through.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254",
                                                                 "100.100.100.200"))


def resolve_host(host: str) -> list[Address]:
    """Every address `host` resolves to (an IP literal resolves to itself); [] when it does not resolve.

    The one resolver of the package: the policy check and the connection both use its answer, so a name
    is looked up once per connection and the connection goes to an address that was checked."""
    try:
        return [_canonical(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return []
    out: list[Address] = []
    for info in infos:
        addr = _canonical(ipaddress.ip_address(str(info[4][0]).split("%")[0]))
        if addr not in out:
            out.append(addr)
    return out


def _canonical(addr: Address) -> Address:
    """::ffff:169.254.169.254 is 169.254.169.254 on the wire: judge the IPv4 address."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _never_by_name(addr: Address) -> bool:
    return addr in METADATA_ADDRESSES or addr.is_link_local or addr.is_unspecified or addr.is_multicast


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
        shown = f"[{host}]" if ":" in host else host  # fd00::1:8000 would read as an address, not host:port
        return TargetPolicy.of([*self.allowed, *(str(n) for n in self._networks), f"{shown}:{parts.port}"
                                if parts.port else host], self.allow_loopback)

    def is_loopback(self, url: str) -> bool:
        host = urlsplit(normalize_base_url(url)).hostname or ""
        addresses = resolve_host(host)
        return bool(addresses) and all(a.is_loopback for a in addresses)

    def _listed_by_address(self, addr: Address, port: int) -> bool:
        return any(addr in net for net in self._networks) or str(addr) in self.allowed \
            or f"{addr}:{port}" in self.allowed or f"[{addr}]:{port}" in self.allowed

    def _name_listed(self, host: str, port: int) -> bool:
        return host in self.allowed or f"{host}:{port}" in self.allowed

    def address_allowed(self, addr: Address, port: int, *, name_listed: bool = False) -> bool:
        addr = _canonical(addr)
        if self._listed_by_address(addr, port):
            return True
        if _never_by_name(addr):
            return False
        return (self.allow_loopback and addr.is_loopback) or name_listed

    def addresses(self, host: str, port: int, *, must_resolve: bool = True) -> list[Address]:
        """The checked addresses of host:port, in resolver order; raise unless every one is allowed.

        A listed name vouches for the ordinary addresses it resolves to, never for a metadata, link-local,
        unspecified or multicast one. `must_resolve=False` (a proxy will resolve the name) accepts a listed
        name that does not resolve here, and returns []."""
        host = host.lower().strip("[]")
        name_listed = self._name_listed(host, port)
        found = resolve_host(host)
        if not found:
            if not must_resolve and name_listed:
                return []
            raise BadInputError(f"cannot resolve host {host!r}")
        refused = [a for a in found if not self.address_allowed(a, port, name_listed=name_listed)]
        if not refused:
            return found
        special = [a for a in refused if _never_by_name(a)]
        if special:
            raise TargetNotAllowedError(
                f"target {host}:{port} resolves to {special[0]} (cloud metadata, link-local or unspecified "
                f"address); such an address is reached only when {ENV_ALLOWED} lists it by address")
        raise TargetNotAllowedError(
            f"target {host}:{port} is not allowed; only loopback is allowed by default. "
            f"Add it to {ENV_ALLOWED} (host, host:port or CIDR)"
        )

    def check(self, url: str) -> str:
        """Return the normalized base URL, or raise TargetNotAllowedError (every resolved address is checked)."""
        base = normalize_base_url(url)
        parts = urlsplit(base)
        self.addresses(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        return base
