"""Connections that go only where the target policy allows, and response reads with a size and time limit.

httpx resolves a host name itself when it connects, so a check made before the request and the address
actually reached could differ (a DNS answer that changes in between, "rebinding"). Here the network
backend under httpx's connection pool resolves the name once, checks every address against the policy
and connects to a checked address. The URL is not rewritten: the Host header, TLS SNI and certificate
verification still use the original name.

Every response is read under a byte cap counted while the body streams in (a server cannot make us hold
more than the cap) and an overall deadline for the whole exchange, enforced on each socket operation (a
server that trickles one byte every few seconds cannot hold a read open for ever).

Proxies from the environment are not used unless the operator sets VLLM_TUNE_USE_PROXY=1: a proxy would
see our API key or HF token (over plain HTTP) and would resolve the name itself, beyond the policy's reach.
"""

from __future__ import annotations

import contextvars
import math
import os
import time
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import anyio.to_thread
import httpcore
import httpx

from vllm_tune.tools.net.targets import TargetPolicy

ENV_USE_PROXY = "VLLM_TUNE_USE_PROXY"
DEFAULT_MAX_BYTES = 64 * 1024 * 1024

# The deadline of the exchange running in this thread or task (time.monotonic); socket operations made
# under it get at most the time left.
_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("vllm_tune_http_deadline", default=math.inf)


class ResponseTooLargeError(httpx.ReadError):
    """The response body passed the client's byte cap (raised while reading, before the rest arrives)."""


class DeadlineExceededError(httpx.ReadTimeout):
    """The exchange took longer than the client's overall deadline."""


def proxies_enabled() -> bool:
    return os.environ.get(ENV_USE_PROXY, "").strip().lower() in ("1", "true", "yes")


def _time_left(timeout: float | None, exc: type[Exception]) -> float | None:
    left = _deadline.get() - time.monotonic()
    if left == math.inf:
        return timeout
    if left <= 0:
        raise exc("the overall deadline of the request passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname,
                                             _time_left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _AsyncStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(await self._inner.start_tls(ssl_context, server_hostname,
                                                        _time_left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class PinnedBackend(httpcore.NetworkBackend):
    """Connects to a policy-checked address of the requested host (or, without a policy, to the host)."""

    def __init__(self, policy: TargetPolicy | None) -> None:
        self._policy = policy
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        targets = [str(a) for a in self._policy.addresses(host, port)] if self._policy else [host]
        error: Exception | None = None
        for address in targets:
            try:
                return _Stream(self._inner.connect_tcp(address, port, _time_left(timeout, httpcore.ConnectTimeout),
                                                       local_address, socket_options))
            except httpcore.ConnectError as exc:
                error = exc
        assert error is not None
        raise error

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not used")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class AsyncPinnedBackend(httpcore.AsyncNetworkBackend):
    """The asyncio twin of PinnedBackend (the name is resolved in a worker thread)."""

    def __init__(self, policy: TargetPolicy | None) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        policy = self._policy
        targets = [str(a) for a in await anyio.to_thread.run_sync(policy.addresses, host, port)] if policy \
            else [host]
        error: Exception | None = None
        for address in targets:
            try:
                return _AsyncStream(await self._inner.connect_tcp(
                    address, port, _time_left(timeout, httpcore.ConnectTimeout), local_address, socket_options))
            except httpcore.ConnectError as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not used")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _env_proxy(url: httpx.URL) -> str | None:
    """The environment's proxy for this URL, honouring NO_PROXY, when the operator opted in."""
    if not proxies_enabled():
        return None
    if urllib.request.proxy_bypass_environment(url.host):  # type: ignore[attr-defined]
        return None
    found = urllib.request.getproxies_environment()
    return found.get(url.scheme) or found.get("all")


# vLLM's API server closes a keep-alive connection after 5 s idle (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, vllm/envs.py L111
# @v0.32.0, passed to uvicorn's timeout_keep_alive): a client that keeps idle connections just as long can send a
# request on one the server is closing, and that request fails with a read error through no fault of the server.
KEEPALIVE_EXPIRY_S = 4.0


def _limits(max_connections: int) -> dict[str, Any]:
    return {"max_connections": max_connections, "max_keepalive_connections": min(20, max_connections),
            "keepalive_expiry": KEEPALIVE_EXPIRY_S}


def _check_headers(response: httpx.Response, request: httpx.Request, max_bytes: int) -> None:
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise ResponseTooLargeError(f"the response is {int(length)} bytes, over the {max_bytes}-byte limit",
                                    request=request)
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        # We ask for identity: a compressed body could inflate far past the cap after we counted it.
        raise httpx.DecodingError(f"unrequested content-encoding {encoding!r}", request=request)


def _timeout(exc: httpx.TimeoutException, deadline: float, request: httpx.Request) -> httpx.TimeoutException:
    """The overall deadline, named as such when it is what ran out (not one read's timeout)."""
    if time.monotonic() >= deadline - 0.01:
        return DeadlineExceededError("the overall deadline of the request passed", request=request)
    return exc


class _Budget:
    """What one response body may still take: bytes under the cap, time before the overall deadline."""

    def __init__(self, request: httpx.Request, deadline: float, max_bytes: int) -> None:
        self.request, self.deadline, self._max, self._seen = request, deadline, max_bytes, 0

    def count(self, chunk: bytes) -> bytes:
        self._seen += len(chunk)
        if self._seen > self._max:
            raise ResponseTooLargeError(f"the response passed the {self._max}-byte limit", request=self.request)
        if time.monotonic() > self.deadline:
            raise DeadlineExceededError("the overall deadline of the request passed", request=self.request)
        return chunk


class _BoundedStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, request: httpx.Request, deadline: float, max_bytes: int) -> None:
        self._inner, self._budget = inner, _Budget(request, deadline, max_bytes)

    def __iter__(self) -> Iterator[bytes]:
        chunks, budget = iter(self._inner), self._budget
        while True:
            token = _deadline.set(budget.deadline)  # read timeouts end at the overall deadline
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except httpx.TimeoutException as exc:
                raise _timeout(exc, budget.deadline, budget.request) from None
            finally:
                _deadline.reset(token)
            yield budget.count(chunk)

    def close(self) -> None:
        self._inner.close()


class _AsyncBoundedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, request: httpx.Request, deadline: float,
                 max_bytes: int) -> None:
        self._inner, self._budget = inner, _Budget(request, deadline, max_bytes)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks, budget = self._inner.__aiter__(), self._budget
        while True:
            token = _deadline.set(budget.deadline)
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except httpx.TimeoutException as exc:
                raise _timeout(exc, budget.deadline, budget.request) from None
            finally:
                _deadline.reset(token)
            yield budget.count(chunk)

    async def aclose(self) -> None:
        await self._inner.aclose()


class GuardedTransport(httpx.BaseTransport):
    """Direct connections pinned to checked addresses; bounded responses; a proxy only when opted in."""

    def __init__(self, policy: TargetPolicy, *, max_bytes: int, deadline_s: float, max_connections: int = 10,
                 verify: bool | Any = True) -> None:
        self._policy, self._max, self._deadline_s = policy, max_bytes, deadline_s
        self._verify, self._max_connections = verify, max_connections
        ssl_context = httpx.create_ssl_context(verify=verify)  # built once (loading CA roots is not free)
        self._direct = httpx.HTTPTransport(verify=ssl_context)
        self._direct._pool = httpcore.ConnectionPool(  # the pool httpx builds, on our backend
            ssl_context=ssl_context, network_backend=PinnedBackend(policy), **_limits(max_connections))
        self._proxied: dict[str, httpx.HTTPTransport] = {}

    def _route(self, request: httpx.Request) -> httpx.BaseTransport:
        proxy = _env_proxy(request.url)
        if proxy is None:
            return self._direct
        # The proxy resolves the name: check what we can here (the name, and its addresses if they resolve).
        self._policy.addresses(request.url.host, request.url.port or (443 if request.url.scheme == "https" else 80),
                               must_resolve=False)
        if proxy not in self._proxied:
            transport = httpx.HTTPTransport(verify=self._verify, proxy=proxy)
            self._proxied[proxy] = transport
        return self._proxied[proxy]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = min(_deadline.get(), time.monotonic() + self._deadline_s)
        token = _deadline.set(deadline)
        try:
            response = self._route(request).handle_request(request)
        except httpx.TimeoutException as exc:
            raise _timeout(exc, deadline, request) from None
        finally:
            _deadline.reset(token)
        try:
            _check_headers(response, request, self._max)
        except httpx.HTTPError:
            response.close()
            raise
        assert isinstance(response.stream, httpx.SyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers, extensions=response.extensions,
                              stream=_BoundedStream(response.stream, request, deadline, self._max))

    def close(self) -> None:
        self._direct.close()
        for transport in self._proxied.values():
            transport.close()


class AsyncGuardedTransport(httpx.AsyncBaseTransport):
    """The asyncio twin of GuardedTransport."""

    def __init__(self, policy: TargetPolicy, *, max_bytes: int, deadline_s: float, max_connections: int = 10,
                 verify: bool | Any = True) -> None:
        self._policy, self._max, self._deadline_s = policy, max_bytes, deadline_s
        self._verify = verify
        ssl_context = httpx.create_ssl_context(verify=verify)
        self._direct = httpx.AsyncHTTPTransport(verify=ssl_context)
        self._direct._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context, network_backend=AsyncPinnedBackend(policy), **_limits(max_connections))
        self._proxied: dict[str, httpx.AsyncHTTPTransport] = {}

    async def _route(self, request: httpx.Request) -> httpx.AsyncBaseTransport:
        proxy = _env_proxy(request.url)
        if proxy is None:
            return self._direct
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        await anyio.to_thread.run_sync(lambda: self._policy.addresses(request.url.host, port, must_resolve=False))
        if proxy not in self._proxied:
            self._proxied[proxy] = httpx.AsyncHTTPTransport(verify=self._verify, proxy=proxy)
        return self._proxied[proxy]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        deadline = min(_deadline.get(), time.monotonic() + self._deadline_s)
        token = _deadline.set(deadline)
        try:
            response = await (await self._route(request)).handle_async_request(request)
        except httpx.TimeoutException as exc:
            raise _timeout(exc, deadline, request) from None
        finally:
            _deadline.reset(token)
        try:
            _check_headers(response, request, self._max)
        except httpx.HTTPError:
            await response.aclose()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers, extensions=response.extensions,
                              stream=_AsyncBoundedStream(response.stream, request, deadline, self._max))

    async def aclose(self) -> None:
        await self._direct.aclose()
        for transport in self._proxied.values():
            await transport.aclose()


def guarded_client(policy: TargetPolicy, *, timeout: float = 10.0, deadline_s: float = 60.0,
                   max_bytes: int = DEFAULT_MAX_BYTES, headers: dict[str, str] | None = None,
                   max_connections: int = 10, base_url: str = "") -> httpx.Client:
    """A sync client that reaches only `policy`'s targets, at checked addresses, with bounded reads."""
    return httpx.Client(
        transport=GuardedTransport(policy, max_bytes=max_bytes, deadline_s=deadline_s,
                                   max_connections=max_connections),
        timeout=timeout, follow_redirects=False, trust_env=False, base_url=base_url,
        headers={"Accept-Encoding": "identity", **(headers or {})})


def async_guarded_client(policy: TargetPolicy, *, timeout: float = 30.0, deadline_s: float = 60.0,
                         max_bytes: int = DEFAULT_MAX_BYTES, headers: dict[str, str] | None = None,
                         max_connections: int = 10, base_url: str = "") -> httpx.AsyncClient:
    """The asyncio twin of guarded_client."""
    return httpx.AsyncClient(
        transport=AsyncGuardedTransport(policy, max_bytes=max_bytes, deadline_s=deadline_s,
                                        max_connections=max_connections),
        timeout=timeout, follow_redirects=False, trust_env=False, base_url=base_url,
        headers={"Accept-Encoding": "identity", **(headers or {})})
