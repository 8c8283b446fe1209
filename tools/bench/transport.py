"""A lean HTTP/1.1 streaming transport for the load path, on asyncio protocols.

Why not httpx here: measured on this machine, httpx.AsyncClient (anyio backend) spent about 20 ms of
CPU per streamed request (pool bookkeeping and per-call imports), so a 2-core client could not hold
even 100 req/s without the client becoming the bottleneck. This transport timestamps each network
read inside `data_received` (the earliest point Python sees the bytes), decodes chunked bodies in
place, keeps connections alive in a pool sized to the load, and costs a fraction of that. The control
plane (models, tokenizer, /metrics) still uses httpx.

Timing precision: the stock epoll selector rounds every timeout up to whole milliseconds, so a send
scheduled with asyncio.sleep left on average ~0.5 ms late (p99 ~1 ms) even on an idle machine.
`PreciseSelector` waits on the epoll descriptor with select(), whose timeout has microsecond
resolution, then harvests the events with a zero-timeout epoll. It also notes when the kernel
handed over the ready events (`last_poll`): every read of that loop iteration is stamped with that
moment, not with the later moment Python got round to it, so responses that arrive together are
not charged for each other's parsing.
"""

from __future__ import annotations

import asyncio
import select
import selectors
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from vllm_tune.tools.bench.client import StreamTimer
from vllm_tune.tools.bench.records import RequestRecord
from vllm_tune.tools.errors import VllmTuneError
from vllm_tune.tools.net.http import SecretRedactor
from vllm_tune.tools.net.targets import TargetPolicy

_HEAD, _SIZE, _DATA, _LENGTH, _UNTIL_CLOSE, _DONE = range(6)
Clock = Callable[[], float]
_SELECT_MAX_FD = 1024  # select() cannot watch descriptors at or above FD_SETSIZE
# A response may stream at most this much (a max_tokens-bounded completion is a few MB of SSE even at
# 100k tokens), and a header block or a single SSE event at most this much: a server that never ends
# one cannot make the client hold the bytes.
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
MAX_HEAD_BYTES = 64 * 1024


class PreciseSelector(selectors.EpollSelector):
    """epoll whose timeouts keep microsecond precision, and which records when each poll returned."""

    def __init__(self) -> None:
        super().__init__()
        self._precise = self.fileno() < _SELECT_MAX_FD
        self.polled_at = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self._precise and timeout is not None and timeout > 0:
            select.select([self.fileno()], [], [], timeout)  # returns when an event is ready or on time
            timeout = 0
        ready = super().select(timeout)
        self.polled_at = time.perf_counter()
        return ready

    def last_poll(self) -> float:
        """When the current loop iteration's events were collected (perf_counter seconds)."""
        return self.polled_at or time.perf_counter()


def precise_loop() -> tuple[asyncio.AbstractEventLoop, Clock]:
    """A new event loop on PreciseSelector and the clock that stamps its reads."""
    sel = PreciseSelector()
    return asyncio.SelectorEventLoop(sel), sel.last_poll


class _Conn(asyncio.Protocol):
    def __init__(self, clock: Clock = time.perf_counter) -> None:
        self.clock = clock
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.buf = bytearray()
        self.state = _DONE
        self.timer: StreamTimer | None = None
        self.fut: asyncio.Future[int] | None = None
        self.status = 0
        self.remaining = 0
        self.keep_alive = True
        self.got_bytes = False
        self.error_body = bytearray()
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        fut = self.fut
        if fut is not None and not fut.done():
            if self.state == _UNTIL_CLOSE:
                self._deliver(bytes(self.buf), self.clock())
                fut.set_result(self.status)
            else:
                fut.set_exception(ConnectionError("connection closed by the server mid-response"))

    def start(self, data: bytes, timer: StreamTimer, fut: asyncio.Future[int]) -> None:
        self.buf.clear()
        self.error_body.clear()
        self.state, self.timer, self.fut, self.status, self.got_bytes = _HEAD, timer, fut, 0, False
        self.received = 0
        assert self.transport is not None
        self.transport.write(data)

    def _deliver(self, data: bytes, now: float) -> None:
        if not data:
            return
        if self.status == 200 and self.timer is not None:
            self.timer.feed(data, now)
        elif len(self.error_body) < 2000:
            self.error_body += data

    def _finish(self) -> None:
        self.state = _DONE
        if self.fut is not None and not self.fut.done():
            self.fut.set_result(self.status)

    def data_received(self, data: bytes) -> None:
        now = self.clock()
        self.got_bytes = True
        self.received += len(data)
        buf = self.buf
        buf += data
        try:
            if self.received > MAX_RESPONSE_BYTES:
                raise ValueError(f"the response passed {MAX_RESPONSE_BYTES >> 20} MiB")
            self._parse(buf, now)
            if self.state == _HEAD and len(buf) > MAX_HEAD_BYTES:
                raise ValueError(f"a header block over {MAX_HEAD_BYTES >> 10} KiB")
        except (ValueError, IndexError) as exc:
            if self.fut is not None and not self.fut.done():
                self.fut.set_exception(ConnectionError(f"malformed HTTP response: {exc}"))
            self.keep_alive = False
            if self.transport is not None:
                self.transport.close()

    def _parse(self, buf: bytearray, now: float) -> None:  # noqa: C901 - one small state machine
        while True:
            state = self.state
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                lines = bytes(buf[:end]).split(b"\r\n")
                del buf[:end + 4]
                self.status = int(lines[0].split(b" ", 2)[1])
                chunked, length = False, -1
                self.keep_alive = not lines[0].startswith(b"HTTP/1.0")
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    key = name.strip().lower()
                    if key == b"transfer-encoding":
                        chunked = b"chunked" in value.lower()
                    elif key == b"content-length":
                        length = int(value)
                    elif key == b"connection":
                        self.keep_alive = b"close" not in value.lower()
                if chunked:
                    self.state = _SIZE
                elif length >= 0:
                    self.state, self.remaining = _LENGTH, length
                else:
                    self.state, self.keep_alive = _UNTIL_CLOSE, False
            elif state == _SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(buf[:end]).split(b";", 1)[0], 16)
                if size == 0:
                    if buf.find(b"\r\n\r\n") < 0 and len(buf) < end + 4:
                        return  # wait for the (empty) trailer section
                    del buf[:]
                    self._finish()
                    return
                del buf[:end + 2]
                self.state, self.remaining = _DATA, size
            elif state == _DATA:
                if len(buf) < self.remaining + 2:
                    return
                self._deliver(bytes(buf[:self.remaining]), now)
                del buf[:self.remaining + 2]
                self.state = _SIZE
            elif state == _LENGTH:
                if len(buf) < self.remaining:
                    return
                self._deliver(bytes(buf[:self.remaining]), now)
                del buf[:self.remaining]
                self._finish()
                return
            elif state == _UNTIL_CLOSE:
                self._deliver(bytes(buf), now)
                del buf[:]
                return
            else:
                return


class StreamingPool:
    """Keep-alive connections to one server; at most `max_connections` requests in flight."""

    def __init__(self, base_url: str, *, max_connections: int, timeout_s: float, api_key: str | None,
                 redact: SecretRedactor, clock: Clock = time.perf_counter, policy: TargetPolicy | None = None) -> None:
        self._clock = clock
        self._policy = policy or TargetPolicy.from_env()
        self._addresses: list[str] | None = None
        self._resolving = asyncio.Lock()
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        host_header = f"{self.host}:{parts.port}" if parts.port else self.host
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head = (f"Host: {host_header}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
                      f"User-Agent: vllm-tune-bench\r\n{auth}")
        self._idle: list[_Conn] = []
        self._sem = asyncio.Semaphore(max_connections)
        self._ssl = ssl.create_default_context() if self.tls else None
        self._redact = redact

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        async with self._resolving:
            if self._addresses is None:
                # Resolved and checked once for the pool: every connection goes to an address the policy
                # passed, whatever the name resolves to later. TLS still verifies the original name.
                checked = await loop.run_in_executor(None, self._policy.addresses, self.host, self.port)
                self._addresses = [str(a) for a in checked]
        error: OSError | None = None
        for address in self._addresses:
            try:
                _transport, conn = await loop.create_connection(
                    lambda: _Conn(self._clock), address, self.port, ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None)
                return conn
            except OSError as exc:
                error = exc
        assert error is not None
        raise error

    def request_bytes(self, path: str, body: bytes) -> bytes:
        return (f"POST {self.prefix}{path} HTTP/1.1\r\n{self._head}Content-Length: {len(body)}\r\n\r\n").encode() \
            + body

    async def send(self, data: bytes, rec: RequestRecord, *, chat: bool) -> None:
        """Send one prepared request, filling `rec`; raises only CancelledError."""
        async with self._sem:
            rec.start_time = time.perf_counter()
            timer = StreamTimer(rec, chat)
            conn: _Conn | None = None
            try:
                for attempt in (0, 1):
                    reused = bool(self._idle)
                    conn = self._idle.pop() if reused else await self._connect()
                    if conn.lost:
                        continue
                    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
                    conn.start(data, timer, fut)
                    try:
                        async with asyncio.timeout(self.timeout_s):
                            status = await fut
                        break
                    except ConnectionError:
                        # A kept-alive connection the server already closed: retry once on a fresh one.
                        if attempt == 0 and reused and not conn.got_bytes:
                            continue
                        raise
                else:
                    raise ConnectionError("could not send the request")
                if status != 200:
                    detail = bytes(conn.error_body[:300]).decode("utf-8", "replace")
                    rec.error = self._redact(f"HTTP {status}: {detail}")
                else:
                    timer.finish()
                if conn.keep_alive and not conn.lost and conn.state == _DONE:
                    self._idle.append(conn)
                    conn = None
            except asyncio.CancelledError:
                rec.success = False
                raise
            except TimeoutError:
                rec.success = False
                rec.error = f"timed out after {self.timeout_s:g} s"
            except VllmTuneError as exc:  # the target's name now resolves to an address the policy refuses
                rec.success = False
                rec.error = str(exc)[:300]
            except (OSError, ConnectionError, ssl.SSLError) as exc:
                rec.success = False
                rec.error = self._redact(f"{type(exc).__name__}: {exc}")[:300]
            except (ValueError, KeyError, AttributeError, TypeError) as exc:
                rec.success = False
                rec.error = f"malformed stream: {type(exc).__name__}: {exc}"[:300]
            finally:
                if conn is not None and conn.transport is not None:
                    conn.transport.close()

    def close(self) -> None:
        for conn in self._idle:
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()
