"""SSE timing and the HTTP/1.1 chunked parser, fed in awkward pieces."""

from __future__ import annotations

import asyncio
import json

import pytest

from vllm_tune.tools.bench.client import StreamTimer, build_body
from vllm_tune.tools.bench.records import RequestRecord
from vllm_tune.tools.bench.transport import _Conn


def sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def completion(text: str) -> bytes:
    return sse({"choices": [{"index": 0, "text": text}]})


USAGE = sse({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})


def test_timer_measures_ttft_itl_and_latency_at_last_token() -> None:
    rec = RequestRecord(index=0, intended_send=10.0, start_time=10.0)
    t = StreamTimer(rec, chat=False)
    t.feed(b": ping\n\n" + completion("a"), 10.05)
    t.feed(completion("b")[:9], 10.06)  # an event split across reads counts when it completes
    t.feed(completion("b")[9:], 10.07)
    t.feed(completion("c") + USAGE + b"data: [DONE]\n\n", 10.09)
    t.finish()
    assert rec.success and rec.chunks == 3
    assert rec.ttft == pytest.approx(0.05)
    assert list(rec.itl) == pytest.approx([0.02, 0.02])
    assert rec.latency == pytest.approx(0.09)
    assert (rec.output_len, rec.prompt_len, rec.usage_reported) == (3, 7, True)
    assert rec.text == ""  # text is only kept when usage is missing


def test_chat_role_delta_is_not_the_first_token() -> None:
    rec = RequestRecord(index=0, intended_send=0.0, start_time=0.0)
    t = StreamTimer(rec, chat=True)
    t.feed(sse({"choices": [{"delta": {"role": "assistant", "content": ""}}]}), 0.01)
    t.feed(sse({"choices": [{"delta": {"content": "hi"}}]}), 0.05)
    t.feed(sse({"choices": [{"delta": {"content": " there"}}]}), 0.06)
    t.finish()
    assert rec.ttft == pytest.approx(0.05) and rec.chunks == 2
    assert rec.text == "hi there" and not rec.usage_reported


def test_stream_without_tokens_is_a_failure() -> None:
    rec = RequestRecord(index=0, intended_send=0.0, start_time=0.0)
    t = StreamTimer(rec, chat=False)
    t.feed(b"data: [DONE]\n\n", 0.1)
    t.finish()
    assert not rec.success and "no token" in rec.error


def test_body_uses_usage_stream_option_and_ignore_eos() -> None:
    body = json.loads(build_body("completions", "m", "p", 5, ignore_eos=True))
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 5 and body["ignore_eos"] is True
    chat = json.loads(build_body("chat", "m", "p", 5, ignore_eos=False))
    assert chat["messages"] == [{"role": "user", "content": "p"}] and chat["max_completion_tokens"] == 5
    assert "ignore_eos" not in chat


def chunked(payloads: list[bytes]) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    for p in payloads:
        out += f"{len(p):x}\r\n".encode() + p + b"\r\n"
    return out + b"0\r\n\r\n"


@pytest.mark.parametrize("piece", [1, 3, 17, 10_000])
def test_chunked_response_parsed_in_any_split(piece: int) -> None:
    loop = asyncio.new_event_loop()
    try:
        rec = RequestRecord(index=0, intended_send=0.0, start_time=0.0)
        conn = _Conn()
        fut: asyncio.Future[int] = loop.create_future()
        conn.transport = None
        conn.state, conn.timer, conn.fut, conn.status = 0, StreamTimer(rec, chat=False), fut, 0
        data = chunked([completion("a"), completion("b") + completion("c"), USAGE, b"data: [DONE]\n\n"])
        for i in range(0, len(data), piece):
            conn.data_received(data[i:i + piece])
        assert fut.done() and fut.result() == 200
        assert conn.timer is not None
        conn.timer.finish()
        assert rec.chunks == 3 and rec.output_len == 3 and conn.keep_alive
    finally:
        loop.close()


def test_error_status_keeps_body_for_the_message() -> None:
    loop = asyncio.new_event_loop()
    try:
        rec = RequestRecord(index=0, intended_send=0.0, start_time=0.0)
        conn = _Conn()
        fut: asyncio.Future[int] = loop.create_future()
        conn.state, conn.timer, conn.fut = 0, StreamTimer(rec, chat=False), fut
        body = b'{"error": "model not found"}'
        conn.data_received(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
                           + body)
        assert fut.result() == 404 and bytes(conn.error_body) == body and not conn.keep_alive
    finally:
        loop.close()
