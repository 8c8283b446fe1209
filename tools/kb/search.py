"""Keyword search over knowledge entries (BM25 over id, title, tags, statement and details)."""

from __future__ import annotations

import math
import re
from collections import Counter

from pydantic import BaseModel, Field

from vllm_tune.tools.kb.loader import KnowledgeBase
from vllm_tune.tools.kb.schema import Entry, EntryKind

_WORD = re.compile(r"[a-z0-9_]+")
# Field weights: a hit in the id or title says more than one in the body text.
_WEIGHTS = {"id": 3.0, "title": 3.0, "tags": 2.0, "names": 3.0, "statement": 1.0, "details": 0.5}


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("-", "_").replace(":", "_"))


def _expand(tokens: list[str]) -> list[str]:
    """Split snake_case compounds too, so 'max_num_seqs' also matches 'seqs'."""
    out: list[str] = []
    for tok in tokens:
        out.append(tok)
        if "_" in tok:
            out.extend(part for part in tok.split("_") if part)
    return out


def _fields(entry: Entry) -> dict[str, str]:
    names = " ".join(
        n for n in (
            entry.metric.name if entry.metric else None,
            entry.flag.name if entry.flag else None,
            entry.env.name if entry.env else None,
        ) if n
    )
    return {
        "id": entry.id,
        "title": entry.title,
        "tags": " ".join(entry.tags),
        "names": names,
        "statement": entry.statement,
        "details": entry.details or "",
    }


class SearchHit(BaseModel):
    id: str
    kind: EntryKind
    title: str
    score: float
    evidence: str
    snippet: str = Field(description="the first sentence of the statement")
    uri: str


def search(kb: KnowledgeBase, query: str, *, kind: EntryKind | None = None, vllm_version: str | None = None,
           limit: int = 10) -> list[SearchHit]:
    """Rank entries for `query`; optionally only one kind, or only entries holding for a vLLM version."""
    q_terms = set(_expand(_tokens(query)))
    if not q_terms:
        return []
    docs: list[tuple[Entry, Counter[str], float]] = []
    for entry in kb:
        if kind and entry.kind != kind:
            continue
        if vllm_version and not entry.applies_to.vllm.contains(vllm_version):
            continue
        weighted: Counter[str] = Counter()
        for name, text in _fields(entry).items():
            for tok in _expand(_tokens(text)):
                weighted[tok] += _WEIGHTS[name]  # type: ignore[assignment]
        docs.append((entry, weighted, sum(weighted.values())))
    if not docs:
        return []
    avg_len = sum(d[2] for d in docs) / len(docs)
    df: Counter[str] = Counter()
    for _, weighted, _ in docs:
        df.update(t for t in q_terms if t in weighted)
    k1, b = 1.2, 0.75
    hits: list[SearchHit] = []
    for entry, weighted, length in docs:
        score = 0.0
        for term in q_terms:
            tf = weighted.get(term, 0.0)
            if not tf:
                continue
            idf = math.log(1 + (len(docs) - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg_len))
        if score > 0:
            first = entry.statement.split(". ")[0].strip()
            hits.append(SearchHit(id=entry.id, kind=entry.kind, title=entry.title, score=round(score, 3),
                                  evidence=entry.evidence, snippet=first[:300], uri=f"kb://entries/{entry.id}"))
    hits.sort(key=lambda h: (-h.score, h.id))
    return hits[:limit]
