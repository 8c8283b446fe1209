"""Every response read has a byte cap enforced while streaming and an overall deadline.

Issue 18 item 6: an endless /metrics ended in MemoryError (the 64 MiB limit applied after download), a
/metrics trickling one byte every few seconds never ended, a 200 MB /v1/models took 4 GB, and a
/tokenize with no tokens made bench loop for ever.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from netfakes import Net, Served, reply

from vllm_tune.tools.bench import workloads
from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark
from vllm_tune.tools.diagnose.prometheus import read_prometheus
from vllm_tune.tools.errors import TargetError
from vllm_tune.tools.models.hub import fetch_hub_files
from vllm_tune.tools.net import TargetPolicy, fetch_text, http_client

MIB = 1024 * 1024
# A read stopped by its deadline or timeout ends long before this; one that was not would take 60 s or never end.
WELL_BEFORE_S = 30.0


def _chunked_forever(total: int, piece: bytes = b"vllm:x 1\n" * 7000, delay_s: float = 0.0) -> Any:
    """A handler streaming up to `total` bytes in chunked encoding (then ending), recording what it sent."""
    sent = {"bytes": 0}

    def handler(req: Any) -> None:
        req.send_response(200)
        req.send_header("Content-Type", "text/plain")
        req.send_header("Transfer-Encoding", "chunked")
        req.end_headers()
        try:
            while sent["bytes"] < total:
                req.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                req.wfile.flush()
                sent["bytes"] += len(piece)
                if delay_s:
                    time.sleep(delay_s)
            req.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    return handler, sent


def test_endless_metrics_stops_at_the_cap_while_streaming(net: Net, serve: Any) -> None:
    handler, sent = _chunked_forever(total=400 * MIB)
    served: Served = serve(handler)
    with http_client(TargetPolicy.of([])) as client, pytest.raises(TargetError, match="limit"):
        fetch_text(client, f"{served.url}/metrics")
    time.sleep(0.2)
    # The server could push at most the cap plus what sits in socket buffers before it saw the close.
    assert sent["bytes"] < 80 * MIB


def test_declared_oversize_body_is_refused_before_reading(net: Net, serve: Any) -> None:
    def handler(req: Any) -> None:
        req.send_response(200)
        req.send_header("Content-Length", str(10 * 1024 * MIB))
        req.end_headers()

    served: Served = serve(handler)
    with http_client(TargetPolicy.of([])) as client, pytest.raises(TargetError, match="limit"):
        fetch_text(client, f"{served.url}/metrics")


def test_trickling_metrics_hit_the_overall_deadline(net: Net, serve: Any) -> None:
    handler, _sent = _chunked_forever(total=240, piece=b"v", delay_s=0.25)  # 60 s if read to the end
    served: Served = serve(handler)
    start = time.monotonic()
    with http_client(TargetPolicy.of([]), timeout=5.0, deadline_s=1.5) as client, \
            pytest.raises(TargetError, match="deadline"):
        fetch_text(client, f"{served.url}/metrics")
    # Far below the 60 s of the whole body, whatever else the machine runs (a test process starved beside
    # stress-ng took 5.5 s to give up at a 1.5 s deadline).
    assert time.monotonic() - start < WELL_BEFORE_S


def test_slow_headers_hit_the_overall_deadline(net: Net, serve: Any) -> None:
    def handler(req: Any) -> None:
        req.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(240):  # 60 s of headers
            req.wfile.write(b"X-Slow: 1\r\n")
            req.wfile.flush()
            time.sleep(0.25)

    served: Served = serve(handler)
    start = time.monotonic()
    with http_client(TargetPolicy.of([]), timeout=5.0, deadline_s=1.5) as client, pytest.raises(TargetError):
        fetch_text(client, f"{served.url}/metrics")
    assert time.monotonic() - start < WELL_BEFORE_S


def test_huge_model_list_is_refused_by_the_benchmark(net: Net, serve: Any, tmp_path: Path) -> None:
    handler, sent = _chunked_forever(total=200 * MIB, piece=b"[" * 60000)
    served: Served = serve(handler)
    req = RunBenchmarkInput(url=served.url, concurrency=1, num_prompts=1, save_result=str(tmp_path))
    with pytest.raises(TargetError, match="limit"):
        asyncio.run(run_benchmark(req, policy=TargetPolicy.of([])))
    time.sleep(0.2)
    assert sent["bytes"] < 40 * MIB


def test_prometheus_reply_is_capped(net: Net, serve: Any) -> None:
    handler, _sent = _chunked_forever(total=300 * MIB, piece=b" " * 60000)
    served: Served = serve(handler)
    with http_client(TargetPolicy.of([]), send_api_key=False) as client, pytest.raises(TargetError, match="limit"):
        read_prometheus(client, served.url, selector=None, model=None, window_s=60, end=1000.0)


def test_hub_config_is_capped_and_not_cached(net: Net, serve: Any, tmp_path: Path) -> None:
    body = json.dumps({"model_type": "llama", "pad": "x" * (40 * MIB)}).encode()
    served: Served = serve(lambda req: reply(req, 200, body))
    with pytest.raises(TargetError, match="MiB"):
        fetch_hub_files("acme/big", cache_dir=tmp_path, endpoint=served.url)
    assert not list(tmp_path.rglob("config.json"))


class _EmptyTokenizer(httpx.AsyncBaseTransport):
    """A /tokenize that answers 200 with no tokens, every time."""

    def __init__(self) -> None:
        self.calls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        await asyncio.sleep(0)  # a real server answers asynchronously, so a timeout around the loop can fire
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [], "count": 0, "max_model_len": 64})
        return httpx.Response(200, json={"prompt": ""})


def test_tokenize_without_tokens_ends_with_an_error_not_a_loop() -> None:
    transport = _EmptyTokenizer()

    async def go() -> None:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:1") as client:
            tok = workloads.ServerTokenizer(client, "m", chat=False)
            await asyncio.wait_for(workloads.build_random(tok, n=2, input_lens=[16, 16], output_lens=[4, 4], seed=0),
                                   timeout=20)

    with pytest.raises(TargetError, match="no tokens"):
        asyncio.run(go())
    assert transport.calls < 10


def test_request_timeout_flag_reaches_the_benchmark_input() -> None:
    from vllm_tune.cli.bench import _input
    from vllm_tune.cli.main import build_parser

    args = build_parser().parse_args(["bench", "http://127.0.0.1:8000", "--concurrency", "1",
                                      "--request-timeout", "2.5"])
    assert _input(args).request_timeout_s == 2.5


def test_endless_completion_stream_ends_at_the_request_timeout(net: Net, serve: Any) -> None:
    from vllm_tune.tools.bench.records import RequestRecord
    from vllm_tune.tools.bench.transport import StreamingPool
    from vllm_tune.tools.net import SecretRedactor

    event = b'data: {"choices": [{"text": "x"}]}\n\n'
    handler, _sent = _chunked_forever(total=10**12, piece=event, delay_s=0.01)
    served: Served = serve(handler)
    rec = RequestRecord(0, 0.0)

    async def go() -> None:
        pool = StreamingPool(served.url, max_connections=1, timeout_s=1.0, api_key=None, redact=SecretRedactor(),
                             policy=TargetPolicy.of([]))
        await pool.send(pool.request_bytes("/v1/completions", b"{}"), rec, chat=False)
        pool.close()

    start = time.monotonic()
    asyncio.run(go())
    assert time.monotonic() - start < WELL_BEFORE_S  # the stream never ends by itself
    assert not rec.success and "timed out after 1 s" in rec.error
    assert rec.chunks > 10  # it was streaming tokens the whole time
