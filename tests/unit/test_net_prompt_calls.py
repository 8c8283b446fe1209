"""Exact-length prompt synthesis makes at most two tokenizer calls per prompt, whatever the tokenizer does.

A fake server tokenizes one character per token but counts a prompt with every space merged into the
character after it, so a cut of the pool rarely re-counts as planned: the old synthesis retried up to 8 times (16
calls); now a prompt costs two calls at most and keeps the closest length it found.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from vllm_tune.tools.bench import workloads


class _MergingTokenizer(httpx.AsyncBaseTransport):
    def __init__(self, pieces: bool) -> None:
        self.pieces = pieces
        self.calls: Counter[str] = Counter()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        import json

        self.calls[request.url.path] += 1
        await asyncio.sleep(0)
        body = json.loads(request.content)
        if request.url.path == "/detokenize":
            return httpx.Response(200, json={"prompt": "".join(chr(t) for t in body["tokens"])})
        text = body["prompt"]
        if body.get("add_special_tokens", True):  # a prompt as sent: BOS, and a space merges with what follows
            count = 1 + len(text) - text.rstrip(" ").count(" ")
            return httpx.Response(200, json={"count": count, "tokens": list(range(count)), "max_model_len": 9999})
        ids = [ord(c) for c in text]
        out: dict[str, object] = {"count": len(ids), "tokens": ids, "max_model_len": 9999}
        if self.pieces:
            out["token_strs"] = ["\u0120" if c == " " else c for c in text]
        return httpx.Response(200, json=out)


@pytest.mark.parametrize("pieces", [True, False])
def test_at_most_two_tokenizer_calls_per_prompt(pieces: bool) -> None:
    async def build(n: int) -> tuple[int, list[workloads.WorkItem]]:
        transport = _MergingTokenizer(pieces)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:1") as client:
            tok = workloads.ServerTokenizer(client, "m", chat=False)
            items, _info = await workloads.build_random(tok, n=n, input_lens=[60] * n, output_lens=[4] * n, seed=1)
        return sum(transport.calls.values()), items

    one, _ = asyncio.run(build(1))
    many, items = asyncio.run(build(21))
    assert (many - one) / 20 <= 2.0
    assert len(items) == 21 and all(abs(it.prompt_len - 60) <= 15 for it in items)
