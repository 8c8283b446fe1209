"""Drive a vLLM server into named load states with streaming /v1/completions (loopback only)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx

# A word our tiny tokenizers encode as about one token, so prompt length ~ word count.
_WORD = "hello "


@dataclass
class LoadResult:
    sent: int = 0
    completed: int = 0
    failed: int = 0
    output_chunks: int = 0
    wall_s: float = 0.0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LoadState:
    """A named state: server flags that make it reachable plus the load that reaches it."""

    name: str
    server_args: tuple[str, ...]
    requests: int
    max_tokens: int
    prompt_tokens: int
    concurrency: int
    description: str
    # Run the engine core process on cores of its own and the API server and client on the others
    # (support/cpu_split.py): a state of the front end, which the engine must not slow.
    split_cores: bool = False
    # Top-k log-probabilities per generated token (0: none): the API server detokenizes and serialises each of
    # them for every token it streams, while the engine's share of the work barely changes.
    logprobs: int = 0


def _check_loopback(url: str) -> None:
    host = urlparse(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"load generator only targets loopback servers, got {url}")


async def _one(client: httpx.AsyncClient, url: str, payload: dict[str, object], result: LoadResult) -> None:
    result.sent += 1
    # A distinct first word per request keeps the prefix cache from absorbing the prompts.
    payload = {**payload, "prompt": f"{result.sent} {payload['prompt']}"}
    try:
        async with client.stream("POST", url + "/v1/completions", json=payload) as resp:
            if resp.status_code != 200:
                await resp.aread()
                raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:200]}")
            async for line in resp.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    result.output_chunks += 1
        result.completed += 1
    except Exception as exc:  # a failed request is counted, never hidden
        result.failed += 1
        result.errors.append(f"{type(exc).__name__}: {exc}"[:300])


async def drive_async(
    url: str,
    model: str,
    *,
    requests: int,
    max_tokens: int,
    prompt_tokens: int = 16,
    concurrency: int = 8,
    time_limit_s: float = 120.0,
    logprobs: int = 0,
) -> LoadResult:
    _check_loopback(url)
    if not 0 < requests <= 2000 or not 0 < concurrency <= 256:
        raise ValueError("requests must be 1..2000 and concurrency 1..256")
    payload: dict[str, object] = {
        "model": model,
        "prompt": (_WORD * prompt_tokens).strip(),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.0,
    }
    if logprobs:
        payload["logprobs"] = logprobs
    result = LoadResult()
    sem = asyncio.Semaphore(concurrency)
    t0 = time.monotonic()

    async def bounded(client: httpx.AsyncClient) -> None:
        async with sem:
            if time.monotonic() - t0 < time_limit_s:
                await _one(client, url.rstrip("/"), payload, result)

    # Idle connections expire before vLLM's API server closes them (5 s, VLLM_HTTP_TIMEOUT_KEEP_ALIVE), so a request
    # is never sent on a connection the server is closing (seen beside stress-ng as a ReadError).
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency, keepalive_expiry=4.0)
    # The read timeout outlasts the run's own time limit, so that a request still queued when the limit cuts the
    # run off counts as cut off, not as failed: beside stress-ng a load sized on an idle-looking moment queued
    # 6x longer than planned, and 42 requests waiting without a byte for 120 s read as server failures.
    timeout = httpx.Timeout(time_limit_s + 30.0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        tasks = [asyncio.ensure_future(bounded(client)) for _ in range(requests)]
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=time_limit_s + 10)
        except TimeoutError:
            result.errors.append(f"time limit {time_limit_s:.0f} s reached")
    result.wall_s = time.monotonic() - t0
    return result


def drive(
    url: str,
    model: str,
    *,
    requests: int,
    max_tokens: int,
    prompt_tokens: int = 16,
    concurrency: int = 8,
    time_limit_s: float = 120.0,
    logprobs: int = 0,
) -> LoadResult:
    """Send `requests` streaming completions, at most `concurrency` at once, bounded by `time_limit_s`."""
    return asyncio.run(
        drive_async(
            url,
            model,
            requests=requests,
            max_tokens=max_tokens,
            prompt_tokens=prompt_tokens,
            concurrency=concurrency,
            time_limit_s=time_limit_s,
            logprobs=logprobs,
        )
    )


# vLLM 0.32 with chunked prefill only requires max_num_batched_tokens >= max_num_seqs
# (vllm/config/scheduler.py verify_max_model_len), so both are set to 16: a bucket edge of
# vllm:iteration_tokens_total, which lets tests check that no engine step exceeded the budget.
LONG_PROMPT_BATCH_TOKENS = 16

idle = LoadState("idle", (), 0, 0, 0, 0, "no requests: running = waiting = 0")
steady_light = LoadState("steady_light", (), 12, 32, 16, 2, "light steady load, no queue")
overload = LoadState("overload", ("--max-num-seqs", "2"), 40, 128, 16, 40, "queue grows: waiting > 0")
kv_thrash = LoadState(
    "kv_thrash",
    ("--max-num-seqs", "4", "--num-gpu-blocks-override", "10"),
    20,
    400,
    16,
    20,
    "KV cache too small for the running set: preemptions rise",
)
long_prompts = LoadState(
    "long_prompts",
    ("--max-num-batched-tokens", str(LONG_PROMPT_BATCH_TOKENS), "--max-num-seqs", str(LONG_PROMPT_BATCH_TOKENS)),
    4,
    8,
    600,
    2,
    "prompts far longer than the step token budget: chunked prefill",
)
frontend_bound = LoadState(
    "frontend_bound",
    (),
    256,
    128,
    192,
    64,
    "64 streams on an API server with one core: TTFT passes outside the engine's queue and prefill",
    split_cores=True,
)
STATES: dict[str, LoadState] = {s.name: s for s in (idle, steady_light, overload, kv_thrash, long_prompts,
                                                     frontend_bound)}


def drive_state(url: str, model: str, state: LoadState, time_limit_s: float = 120.0) -> LoadResult:
    if state.requests == 0:
        return LoadResult()
    return drive(
        url,
        model,
        requests=state.requests,
        max_tokens=state.max_tokens,
        prompt_tokens=state.prompt_tokens,
        concurrency=state.concurrency,
        time_limit_s=time_limit_s,
        logprobs=state.logprobs,
    )


def scrape(url: str) -> dict[str, float]:
    """GET /metrics and sum samples by sample name (labels folded), e.g. 'vllm:num_requests_waiting'."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url.rstrip("/") + "/metrics", timeout=10).text
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


def drive_and_watch(
    url: str, model: str, state: LoadState, watch: list[str], interval_s: float = 0.25, time_limit_s: float = 120.0
) -> tuple[LoadResult, dict[str, float]]:
    """Drive `state` while polling /metrics; return the load result and the maximum seen of each `watch` name."""
    import threading

    peaks = {name: 0.0 for name in watch}
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            try:
                values = scrape(url)
            except httpx.HTTPError:
                values = {}
            for name in watch:
                peaks[name] = max(peaks[name], values.get(name, 0.0))
            done.wait(interval_s)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        result = drive_state(url, model, state, time_limit_s)
    finally:
        done.set()
        watcher.join(timeout=15)
    return result, peaks
