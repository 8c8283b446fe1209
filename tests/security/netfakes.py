"""Fixtures for the security tests: a DNS stub, a connect() guard, and small loopback HTTP servers.

No test here reaches a real outside address: names resolve only through the stub, and every connect()
to an address that is not loopback is refused before the system call (and recorded), so a test can
assert that a forbidden address was never even attempted.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

_real_getaddrinfo = socket.getaddrinfo
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


@dataclass
class Net:
    names: dict[str, Callable[[], list[str]]] = field(default_factory=dict)
    lookups: list[str] = field(default_factory=list)
    attempts: list[str] = field(default_factory=list)  # every connect() destination, allowed or not

    def resolve(self, name: str, *addresses: str) -> None:
        self.names[name] = lambda: list(addresses)

    def rebind(self, name: str, first: list[str], then: list[str], first_n: int = 1) -> None:
        """`name` answers `first` on its first `first_n` lookups and `then` on every later one."""
        calls = {"n": 0}

        def answer() -> list[str]:
            calls["n"] += 1
            return first if calls["n"] <= first_n else then

        self.names[name] = answer

    def attempted(self, address: str) -> bool:
        return any(a == address for a in self.attempts)


@pytest.fixture
def net(monkeypatch: pytest.MonkeyPatch) -> Iterator[Net]:
    state = Net()

    def getaddrinfo(host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0,
                    flags: int = 0) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        try:
            ipaddress.ip_address(name.split("%")[0])
            return _real_getaddrinfo(host, port, family, type, proto, flags)  # a literal: no lookup
        except ValueError:
            pass
        state.lookups.append(name)
        if name == "localhost":
            return _real_getaddrinfo(host, port, family, type, proto, flags)
        answer = state.names.get(name.lower())
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known (test DNS stub)")
        out = []
        for addr in answer():
            fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
            sockaddr: tuple[Any, ...] = (addr, port or 0, 0, 0) if fam == socket.AF_INET6 else (addr, port or 0)
            out.append((fam, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr))
        return out

    def guard(sock: socket.socket, address: Any) -> str | None:
        if isinstance(address, tuple) and address and isinstance(address[0], str):
            host = address[0].split("%")[0]
            state.attempts.append(host)
            try:
                ok = ipaddress.ip_address(host).is_loopback
            except ValueError:
                ok = False
            if not ok:
                return host
        return None

    def connect(self: socket.socket, address: Any) -> None:
        refused = guard(self, address)
        if refused is not None:
            raise ConnectionRefusedError(f"test guard: connect to {refused} refused before the system call")
        _real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if guard(self, address) is not None:
            return 111  # ECONNREFUSED
        return _real_connect_ex(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                "NO_PROXY", "no_proxy", "VLLM_TUNE_USE_PROXY", "VLLM_TUNE_ALLOWED_TARGETS"):
        monkeypatch.delenv(var, raising=False)
    yield state


Handler = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Served:
    port: int
    seen: list[dict[str, str]]  # headers of every request, with "path" added

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Served]]:
    """serve(handler) -> a threaded HTTP server on 127.0.0.1 calling handler(request) for every GET/POST."""
    servers: list[ThreadingHTTPServer] = []

    def start(handler: Handler) -> Served:
        seen: list[dict[str, str]] = []

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                length = int(self.headers.get("content-length") or 0)
                self.body = self.rfile.read(length) if length else b""
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    handler(self)

            do_GET = _any
            do_POST = _any

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        server.daemon_threads = True
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return Served(server.server_address[1], seen)

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def reply(req: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str = "application/json",
          headers: dict[str, str] | None = None) -> None:
    req.send_response(status)
    req.send_header("Content-Type", ctype)
    req.send_header("Content-Length", str(len(body)))
    for k, v in (headers or {}).items():
        req.send_header(k, v)
    req.end_headers()
    req.wfile.write(body)


@dataclass
class Proxy:
    port: int
    contacts: list[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    """A loopback 'proxy' that records the first bytes of every connection and answers 502."""
    listener = socket.create_server(("127.0.0.1", 0))
    contacts: list[bytes] = []
    stop = threading.Event()

    def run() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    contacts.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield Proxy(listener.getsockname()[1], contacts)
    stop.set()
    thread.join(2)
    listener.close()
