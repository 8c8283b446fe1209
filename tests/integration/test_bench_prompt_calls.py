"""Exact-length prompts cost at most two tokenizer calls each on the real vLLM CPU server (issue 18, perf).

The old synthesis detokenized a random token slice and re-counted it (two calls per try), retrying up
to 8 times when the cut fell mid-word and the count came out off. Now prompts are runs of whole words whose token
counts are known from one tokenized pool; the requests each call sends are counted at the client.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import httpx
import pytest

from vllm_tune.tools.bench import workloads

pytestmark = [pytest.mark.integration, pytest.mark.anyio]
PROMPTS = 40


async def _build(url: str, model: str, lens: list[int], chat: bool) -> tuple[int, list[workloads.WorkItem]]:
    calls: Counter[str] = Counter()

    async def count(request: httpx.Request) -> None:
        calls[request.url.path] += 1

    async with httpx.AsyncClient(base_url=url, event_hooks={"request": [count]}, trust_env=False,
                                 timeout=60) as client:
        tok = workloads.ServerTokenizer(client, model, chat=chat)
        items, info = await workloads.build_random(tok, n=len(lens), input_lens=lens, output_lens=[8] * len(lens),
                                                   seed=7)
    assert info.exact_input_lengths
    return calls["/tokenize"] + calls["/detokenize"], items


@pytest.mark.parametrize("chat", [False, True])
async def test_exact_prompts_take_at_most_two_tokenizer_calls_each(vllm_server: Any, chat: bool) -> None:
    rng = random.Random(3)
    lens = [rng.randint(16, 400) for _ in range(PROMPTS)]
    one, _ = await _build(vllm_server.url, vllm_server.model, lens[:1], chat)
    many, items = await _build(vllm_server.url, vllm_server.model, lens, chat)
    per_prompt = (many - one) / (PROMPTS - 1)  # the pool and the round-trip check cost the same in both
    # Two calls at most by construction; a run of whole words usually needs only the confirming count
    # (measured: 1.00 per prompt here, the old slice-and-retry synthesis 2.00 on this tokenizer).
    assert per_prompt <= 1.25, f"{per_prompt:.2f} tokenizer calls per prompt"
    assert [it.prompt_len for it in items] == lens  # still exact, as the server counts them
