"""Prompts for a run: random with exact input lengths, shared-prefix, ShareGPT JSON and custom JSONL.

Token counts come from the served tokenizer through vLLM's /tokenize and /detokenize, so the prompt
the server sees has exactly the requested number of tokens (special tokens and, for chat, the chat
template included) without a local tokenizer that could disagree with the server (a common cause of
token counts 20-40 % off, vllm-facts.md §2f). A server without /tokenize still works; lengths are then
approximate and the result says so.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.files import read_text

# The ShareGPT V3 file is about 650 MB; anything far above a dataset that size is not one.
MAX_DATASET_BYTES = 1024 * 1024 * 1024

Prompt = str | list[dict[str, str]]
DatasetKind = Literal["random", "shared-prefix", "sharegpt", "jsonl"]


@dataclass(slots=True)
class WorkItem:
    prompt: Prompt
    prompt_len: int  # tokens the server will see, as far as we know (-1 if unknown)
    output_len: int


@dataclass
class WorkloadInfo:
    kind: str
    exact_input_lengths: bool = True
    tokenizer_roundtrip_ok: bool | None = None
    length_mismatches: int = 0
    notes: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)


def _words(rng: random.Random, n: int = 3000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(n)]


class ServerTokenizer:
    """The served model's tokenizer, reached over HTTP."""

    def __init__(self, client: httpx.AsyncClient, model: str, chat: bool) -> None:
        self.client = client
        self.model = model
        self.chat = chat
        self.available = True

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self.client.post(path, json={"model": self.model, **body})
        except httpx.HTTPError as exc:
            raise TargetError(f"tokenizer request {path} failed: {type(exc).__name__}") from None
        if response.status_code in (404, 405):
            self.available = False
            raise TargetError(f"{path} not available")
        if response.status_code != 200:
            raise TargetError(f"{path} answered HTTP {response.status_code}: {response.text[:200]}")
        out: dict[str, Any] = response.json()
        return out

    async def ids(self, text: str) -> list[int]:
        """Token ids of plain text, without special tokens."""
        body = await self._post("/tokenize", {"prompt": text, "add_special_tokens": False})
        return [int(t) for t in body["tokens"]]

    async def ids_and_pieces(self, text: str) -> tuple[list[int], list[str] | None]:
        """Token ids of plain text and the vocabulary pieces they stand for (None if the server gives none)."""
        body = await self._post("/tokenize", {"prompt": text, "add_special_tokens": False,
                                              "return_token_strs": True})
        pieces = body.get("token_strs")
        ids = [int(t) for t in body["tokens"]]
        if not isinstance(pieces, list) or len(pieces) != len(ids):
            return ids, None
        return ids, [str(p) for p in pieces]

    async def count(self, text: str) -> int:
        """Tokens the server counts for this prompt as sent (specials or chat template included)."""
        if self.chat:
            body = await self._post("/tokenize", {"messages": [{"role": "user", "content": text}],
                                                  "add_generation_prompt": True})
        else:
            body = await self._post("/tokenize", {"prompt": text})
        return int(body["count"])

    async def text(self, ids: list[int]) -> str:
        body = await self._post("/detokenize", {"tokens": ids})
        return str(body["prompt"])


# Vocabulary pieces that begin a word after a space: byte-level BPE (GPT-2, Llama 3, Qwen) writes the
# space as "Ġ", SentencePiece (Llama 2, Mistral) as "▁".
_WORD_START = ("\u0120", "\u2581", " ")


@dataclass
class TokenPool:
    """Token ids of random words; where the served tokenizer starts each word, when that is known.

    With word starts known, a run of whole words has a known token count and its text is the words
    themselves, so a prompt of exact length needs no /detokenize and one /tokenize to confirm it."""

    ids: list[int]
    words: list[str] | None = None  # the words, when `starts` maps onto them
    starts: list[int] = field(default_factory=list)  # token index of each word's first token, then len(ids)

    _index: dict[int, int] = field(default_factory=dict, repr=False)

    def word_run(self, k: int, rng: random.Random, tries: int = 64) -> str | None:
        """The text of consecutive whole words that tokenize to exactly k tokens, if one is found."""
        if self.words is None or k <= 0 or not self.words:
            return None
        if not self._index:
            self._index = {pos: i for i, pos in enumerate(self.starts)}
        for _ in range(tries):
            i = rng.randrange(0, len(self.words))
            j = self._index.get(self.starts[i] + k)
            if j is not None:
                return " " + " ".join(self.words[i:j])
        return None


async def _exact_text(tok: ServerTokenizer, head: str, head_len: int, pool: TokenPool, target: int, overhead: int,
                      rng: random.Random) -> tuple[str, int]:
    """`head` (head_len tokens) followed by pool tokens, so that the whole prompt counts `target` tokens.

    At most two tokenizer calls: a run of whole words is counted once and, if the count is off (a
    tokenizer that merges across words), re-cut once by the difference; without word starts, one
    /detokenize of a pool slice and one count."""
    k = max(0, target - overhead - head_len)
    tail = pool.word_run(k, rng)
    if tail is None:
        start = rng.randrange(0, max(1, len(pool.ids) - k))
        text = head + (await tok.text(pool.ids[start:start + k]) if k else "")
        return text, await tok.count(text)
    text = head + tail
    got = await tok.count(text)
    retry = pool.word_run(k + target - got, rng) if got != target else None
    if retry is None:
        return text, got
    second = head + retry
    got2 = await tok.count(second)
    return (second, got2) if abs(got2 - target) < abs(got - target) else (text, got)


async def _token_pool(tok: ServerTokenizer, rng: random.Random, need: int) -> TokenPool:
    """At least `need` tokens of random words; each /tokenize call must add tokens (no endless loop)."""
    words = _words(rng)
    pool = TokenPool(ids=[], words=[])
    while len(pool.ids) < need:
        chunk = [rng.choice(words) for _ in range(max(64, need - len(pool.ids)))]
        ids, pieces = await tok.ids_and_pieces(" " + " ".join(chunk))
        if not ids:
            raise TargetError(f"the server's /tokenize returned no tokens for {len(chunk)} words; "
                              "cannot build prompts of a known length")
        starts = [i for i, p in enumerate(pieces or []) if p.startswith(_WORD_START)]
        if pool.words is not None and pieces is not None and len(starts) == len(chunk) and starts[0] == 0:
            pool.starts.extend(len(pool.ids) + i for i in starts)
            pool.words.extend(chunk)
        else:
            pool.words, pool.starts = None, []
        pool.ids.extend(ids)
    if pool.words is not None:
        pool.starts.append(len(pool.ids))
    return pool


async def build_random(tok: ServerTokenizer, *, n: int, input_lens: list[int], output_lens: list[int], seed: int,
                       prefix_len: int = 0, num_prefixes: int = 1, parallel: int = 16) -> tuple[list[WorkItem],
                                                                                                 WorkloadInfo]:
    """Unique random prompts of exact lengths; with prefix_len > 0 each shares one of `num_prefixes` prefixes."""
    rng = random.Random(seed)
    kind = "shared-prefix" if prefix_len > 0 else "random"
    info = WorkloadInfo(kind=kind, params={"seed": seed, "prefix_len": prefix_len, "num_prefixes": num_prefixes})
    words = _words(rng)
    if not tok.available:
        return _approximate(rng, words, n, input_lens, output_lens, info)
    try:
        overhead = await tok.count("")
        pool = await _token_pool(tok, rng, max(4096, 4 * max(input_lens) + prefix_len))
        sample = await tok.text(pool.ids[:64])
        info.tokenizer_roundtrip_ok = (await tok.text(await tok.ids(sample))) == sample
        if not info.tokenizer_roundtrip_ok:
            info.notes.append("the served tokenizer does not round-trip text exactly; lengths were re-counted")
        prefixes: list[tuple[str, int]] = []  # (text, tokens without the overhead)
        for _ in range(num_prefixes if prefix_len > 0 else 0):
            text, got = await _exact_text(tok, "", 0, pool, prefix_len + overhead, overhead, rng)
            prefixes.append((text, got - overhead))
    except TargetError as exc:
        if tok.available:
            raise
        info.notes.append(f"server has no tokenizer endpoint ({exc}); input lengths are approximate")
        return _approximate(rng, words, n, input_lens, output_lens, info)

    seeds = [rng.randrange(2**31) for _ in range(n)]
    sem = asyncio.Semaphore(parallel)
    items: list[WorkItem | None] = [None] * n

    async def one(i: int) -> None:
        async with sem:
            local = random.Random(seeds[i])
            head, head_len = prefixes[i % len(prefixes)] if prefixes else ("", 0)
            text, got = await _exact_text(tok, head, head_len, pool, input_lens[i], overhead, local)
            if got != input_lens[i]:
                info.length_mismatches += 1
            items[i] = WorkItem(text, got, output_lens[i])

    await asyncio.gather(*(one(i) for i in range(n)))
    return [it for it in items if it is not None], info


def _approximate(rng: random.Random, words: list[str], n: int, input_lens: list[int], output_lens: list[int],
                 info: WorkloadInfo) -> tuple[list[WorkItem], WorkloadInfo]:
    info.exact_input_lengths = False
    items = [WorkItem(" ".join(rng.choice(words) for _ in range(max(1, input_lens[i] // 2))), -1, output_lens[i])
             for i in range(n)]
    return items, info


def _load_json(path: Path) -> Any:
    text = read_text(path, limit=MAX_DATASET_BYTES, what="dataset")
    try:
        return json.loads(text)
    except RecursionError:
        raise BadInputError(f"dataset {path} is nested too deeply") from None
    except ValueError as exc:
        raise BadInputError(f"dataset {path} is not valid JSON: {exc}") from None


def read_sharegpt(path: str | Path) -> list[tuple[str, str]]:
    """(first human turn, following assistant turn) pairs from a ShareGPT-style JSON file."""
    data = _load_json(Path(path))
    if not isinstance(data, list):
        raise BadInputError(f"{path}: expected a JSON list of conversations")
    pairs: list[tuple[str, str]] = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if isinstance(first, dict) and isinstance(second, dict) and first.get("value") and second.get("value"):
            pairs.append((str(first["value"]), str(second["value"])))
    if not pairs:
        raise BadInputError(f"{path}: no conversations with a prompt and a reply")
    return pairs


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Custom JSONL: {"prompt": str} or {"messages": [...]}, optional "output_len"/"max_tokens"."""
    p = Path(path)
    lines = read_text(p, limit=MAX_DATASET_BYTES, what="dataset").splitlines()
    rows: list[dict[str, Any]] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise BadInputError(f"{p}:{no}: not a JSON object") from None
        if not isinstance(obj, dict) or not (isinstance(obj.get("prompt"), str) or isinstance(obj.get("messages"),
                                                                                                   list)):
            raise BadInputError(f"{p}:{no}: each line needs a 'prompt' string or a 'messages' list")
        rows.append(obj)
    if not rows:
        raise BadInputError(f"dataset {p} is empty")
    return rows


async def build_from_file(tok: ServerTokenizer, *, kind: DatasetKind, path: str, n: int, output_len: int | None,
                          seed: int, max_model_len: int | None) -> tuple[list[WorkItem], WorkloadInfo]:
    rng = random.Random(seed)
    info = WorkloadInfo(kind=kind, params={"path": str(path), "seed": seed})
    items: list[WorkItem] = []
    if kind == "sharegpt":
        pairs = read_sharegpt(path)
        rng.shuffle(pairs)
        for prompt, reply in pairs:
            if len(items) >= n:
                break
            try:
                plen = await tok.count(prompt) if tok.available else -1
                olen = output_len or (len(await tok.ids(reply)) if tok.available else max(1, len(reply) // 4))
            except TargetError:
                plen, olen = -1, output_len or max(1, len(reply) // 4)
            if olen < 4 and output_len is None:
                continue  # too short to time decoding (vLLM's ShareGPT loader skips these too)
            if max_model_len and plen > 0 and plen + olen > max_model_len:
                continue
            items.append(WorkItem(prompt, plen, olen))
    else:
        rows = read_jsonl(path)
        for i in range(n):
            row = rows[i % len(rows)]
            text: Prompt = row["messages"] if isinstance(row.get("messages"), list) else str(row["prompt"])
            olen = int(row.get("output_len") or row.get("max_tokens") or output_len or 128)
            items.append(WorkItem(text, -1, olen))
        info.notes.append("input lengths are taken from the server's usage block")
    if not items:
        raise BadInputError(f"dataset {path} has no usable prompts (after length filters)")
    unique = len(items)
    while len(items) < n:  # reuse prompts when the file is shorter than the run
        items.append(items[len(items) % unique])
    if unique < n:
        info.notes.append(f"the dataset gave {unique} prompts; they are reused to reach {n} requests")
    info.exact_input_lengths = kind == "sharegpt" and tok.available
    return items[:n], info
