"""A deterministic OpenAI-style streaming server with injected TTFT and ITL, for measuring clients.

Raw asyncio protocol (no framework) so that the server costs little CPU; with --procs N, N forked
processes accept on one listening socket so it is never the bottleneck. Token k of a response is
emitted at (request received + TTFT + k * ITL), scheduled against absolute deadlines so delays do not
accumulate; how late the event loop actually emitted is tracked and exposed on /debug/stats, so a
client's measured bias can be separated from the server's own lateness. The loop runs on a selector
with microsecond timeouts (the stock epoll one rounds up to whole milliseconds), and a request counts
as received when the poll that saw its bytes returned, so neither the ms rounding nor the parsing of
other connections' data in the same iteration is added to the injected delays.

Tokenizer: whitespace words; a word `t<N>` is token id N, anything else hashes to an id; a prompt
counts one extra token for BOS (like Llama tokenizers). /tokenize and /detokenize round-trip `t<N>`
text exactly, which is enough for exact-length prompt building.

Run: python stream_server.py --ttft-ms 50 --itl-ms 10 [--procs 2] [--api-key K]; prints one JSON line
{"port": P, "pids": [...]} on stdout when ready.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import select
import selectors
import signal
import socket
import sys
import time
import zlib
from typing import Any

VOCAB = 2048


def _tok_id(word: str) -> int:
    if word.startswith("t") and word[1:].isdigit():
        return int(word[1:])
    return 4 + zlib.crc32(word.encode()) % (VOCAB - 4)


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.auth_ok = 0
        self.auth_bad = 0
        self.in_flight = 0
        self.first_lag_sum = 0.0
        self.first_n = 0
        self.token_lag_sum = 0.0
        self.token_n = 0
        self.ttft_sum = 0.0
        self.ttft_count = 0
        self.last_headers: dict[str, str] = {}
        self.bodies: list[str] = []


class Config:
    ttft: float = 0.05
    itl: float = 0.01
    api_key: str | None = None
    model: str = "test-model"
    max_model_len: int = 4096
    keep_bodies: bool = False


STATS = Stats()
CFG = Config()


class PreciseSelector(selectors.EpollSelector):
    """epoll with microsecond timeouts (via select() on the epoll descriptor); notes when each poll returned."""

    polled_at = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0 and self.fileno() < 1024:
            select.select([self.fileno()], [], [], timeout)
            timeout = 0
        ready = super().select(timeout)
        self.polled_at = time.monotonic()  # the clock of loop.time()
        return ready


SELECTOR = PreciseSelector()


class Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.handles: list[asyncio.TimerHandle] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        for h in self.handles:
            h.cancel()
        if self.busy:
            STATS.in_flight -= 1
            self.busy = False
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while not self.busy:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0"))
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4:end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
            method, path, _ = head[0].split(" ", 2)
            self.handle(method, path, headers, body)

    def send(self, status: int, payload: Any, ctype: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        reason = {200: "OK", 401: "Unauthorized", 404: "Not Found", 400: "Bad Request"}.get(status, "OK")
        if self.transport:
            self.transport.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: "
                                 f"{len(data)}\r\n\r\n".encode() + data)

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        path = path.split("?", 1)[0]
        if path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            STATS.requests += 1
            STATS.last_headers = {k: v for k, v in headers.items() if k in ("authorization", "content-type")}
            if CFG.keep_bodies:
                STATS.bodies.append(body.decode("utf-8", "replace"))
            if CFG.api_key is not None:
                if headers.get("authorization") != f"Bearer {CFG.api_key}":
                    STATS.auth_bad += 1
                    self.send(401, {"error": "unauthorized"})
                    return
                STATS.auth_ok += 1
            self.stream(json.loads(body), chat=path.endswith("chat/completions"))
        elif path == "/v1/models":
            self.send(200, {"object": "list", "data": [{"id": CFG.model, "object": "model", "root": CFG.model,
                                                        "max_model_len": CFG.max_model_len}]})
        elif path == "/version":
            self.send(200, {"version": "0.0.0-teststream"})
        elif path == "/tokenize":
            req = json.loads(body)
            if "messages" in req:
                text = " ".join(m.get("content", "") for m in req["messages"])
                ids = [1, 5, 6] + [_tok_id(w) for w in text.split()] + [7]  # a fixed 4-token chat template
            else:
                ids = ([1] if req.get("add_special_tokens", True) else []) + [_tok_id(w) for w in
                                                                             req["prompt"].split()]
            self.send(200, {"count": len(ids), "max_model_len": CFG.max_model_len, "tokens": ids})
        elif path == "/detokenize":
            req = json.loads(body)
            self.send(200, {"prompt": " ".join(f"t{i}" for i in req["tokens"])})
        elif path == "/metrics":
            self.send(200, metrics_text().encode(), "text/plain; version=0.0.4")
        elif path == "/debug/stats":
            ru = resource.getrusage(resource.RUSAGE_SELF)
            self.send(200, {"requests": STATS.requests, "auth_ok": STATS.auth_ok, "auth_bad": STATS.auth_bad,
                            "first_emit_lag_ms": STATS.first_lag_sum / max(1, STATS.first_n) * 1000,
                            "token_emit_lag_ms": STATS.token_lag_sum / max(1, STATS.token_n) * 1000,
                            "first_emit_lag_sum_ms": STATS.first_lag_sum * 1000, "first_emits": STATS.first_n,
                            "cpu_s": ru.ru_utime + ru.ru_stime, "pid": os.getpid(),
                            "last_headers": STATS.last_headers, "bodies": STATS.bodies[-5:]})
        elif path == "/health":
            self.send(200, b"", "text/plain")
        else:
            self.send(404, {"error": "not found"})

    def stream(self, req: dict[str, Any], chat: bool) -> None:
        n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 16)
        usage = bool((req.get("stream_options") or {}).get("include_usage"))
        if chat:
            text = " ".join(m.get("content", "") for m in req.get("messages", []))
            prompt_tokens = len(text.split()) + 4
        else:
            prompt_tokens = len(str(req.get("prompt", "")).split()) + 1
        assert self.transport is not None
        self.busy = True
        STATS.in_flight += 1
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
        loop = asyncio.get_running_loop()
        t_recv = min(loop.time(), SELECTOR.polled_at or loop.time())

        def event(k: int) -> bytes:
            if chat:
                payload = {"id": "c", "object": "chat.completion.chunk", "model": CFG.model,
                           "choices": [{"index": 0, "delta": {"content": f" t{100 + k}"}, "finish_reason":
                                        "length" if k == n - 1 else None}]}
            else:
                payload = {"id": "c", "object": "text_completion", "model": CFG.model,
                           "choices": [{"index": 0, "text": f" t{100 + k}", "finish_reason":
                                        "length" if k == n - 1 else None}]}
            return _chunk(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")

        def tail() -> bytes:
            out = b""
            if usage:
                u = {"id": "c", "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                                                         "total_tokens": prompt_tokens + n}}
                out += _chunk(b"data: " + json.dumps(u).encode() + b"\n\n")
            return out + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"

        def emit(k: int, deadline: float) -> None:
            if self.transport is None:
                return
            lag = loop.time() - deadline
            if k == 0:
                STATS.first_lag_sum += lag
                STATS.first_n += 1
                STATS.ttft_sum += CFG.ttft + lag
                STATS.ttft_count += 1
                data = b""
                if chat:
                    role = {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
                    data += _chunk(b"data: " + json.dumps(role).encode() + b"\n\n")
                data += event(0)
            else:
                STATS.token_lag_sum += lag
                STATS.token_n += 1
                data = event(k)
            if CFG.itl <= 0:  # zero-work mode: the rest goes out at once
                data += b"".join(event(j) for j in range(k + 1, n))
                k = n - 1
            if k == n - 1:
                data += tail()
                self.busy = False
                STATS.in_flight -= 1
            self.transport.write(data)
            if k < n - 1:
                nxt = t_recv + CFG.ttft + (k + 1) * CFG.itl
                self.handles = [loop.call_at(nxt, emit, k + 1, nxt)]
            elif self.buf:
                self.data_received(b"")

        first = t_recv + CFG.ttft
        if CFG.ttft <= 0:
            emit(0, first)
        else:
            self.handles = [loop.call_at(first, emit, 0, first)]


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def metrics_text() -> str:
    m = CFG.model
    return (
        f'vllm:num_requests_running{{engine="0",model_name="{m}"}} {STATS.in_flight}\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="{m}"}} 0\n'
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="{m}"}} {min(1.0, STATS.in_flight / 100):.4f}\n'
        f'vllm:num_preemptions_total{{engine="0",model_name="{m}"}} 0\n'
        f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="{m}"}} {STATS.ttft_sum}\n'
        f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="{m}"}} {STATS.ttft_count}\n'
        f'vllm:cache_config_info{{block_size="16",engine="0",model_name="{m}",num_gpu_blocks="100"}} 1.0\n'
    )


async def serve(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Conn, sock=sock)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with server:
        await stop.wait()


def run(sock: socket.socket) -> None:
    global SELECTOR
    SELECTOR = PreciseSelector()  # one per process (a forked child must not share the parent's epoll)
    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(SELECTOR)) as runner:
        runner.run(serve(sock))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--api-key")
    ap.add_argument("--model", default="test-model")
    ap.add_argument("--keep-bodies", action="store_true")
    args = ap.parse_args()
    CFG.ttft, CFG.itl = args.ttft_ms / 1000.0, args.itl_ms / 1000.0
    CFG.api_key, CFG.model, CFG.keep_bodies = args.api_key, args.model, args.keep_bodies
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    sock.setblocking(False)
    pids = [os.getpid()]
    children = []
    for _ in range(args.procs - 1):
        pid = os.fork()
        if pid == 0:
            run(sock)
            os._exit(0)
        children.append(pid)
    pids += children

    print(json.dumps({"port": sock.getsockname()[1], "pids": pids}), flush=True)
    try:
        run(sock)
    finally:
        for c in children:
            try:
                os.kill(c, signal.SIGTERM)
                os.waitpid(c, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    sys.exit(0)


if __name__ == "__main__":
    time.sleep(0)
    main()
