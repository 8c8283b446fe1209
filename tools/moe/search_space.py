"""Candidate Triton tile configs for the fused-MoE kernel, in vLLM's config-file format.

The full grid has the same axes vLLM's tuning script searches on CUDA (vllm-facts.md 4.4): BLOCK_SIZE_M/N/K,
GROUP_SIZE_M, num_warps, num_stages. We prune it per batch size with our own rules so a run fits a budget:
- block-quantised weights need each N/K tile to sit inside one quantisation block (one scale per tile);
- tiles larger than the problem (K tile > hidden size, N tile > 2 x N) only waste work;
- an M tile far above the expected tokens per expert is padding, so M tiles are capped near that count.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

KernelConfig = dict[str, int]
Level = Literal["full", "pruned", "quick"]

BLOCK_M = (16, 32, 64, 128, 256)
BLOCK_N = (32, 64, 128, 256)
BLOCK_K = (64, 128, 256)
GROUP_M = (1, 16, 32, 64)
WARPS = (4, 8)
STAGES = (2, 3, 4, 5)

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
"""The batch sizes vLLM's tuning script covers by default; the runtime picks the closest one to each M."""

_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


@dataclass(frozen=True)
class TuneShape:
    """One fused-MoE problem: per-rank experts E, per-rank intermediate N, hidden size K, top-k, dtype."""

    E: int
    N: int
    hidden_size: int
    top_k: int
    dtype: str | None = None
    block_shape: tuple[int, int] | None = None


def config_id(config: KernelConfig) -> str:
    """A stable short text key for one candidate (used in checkpoints)."""
    return ",".join(f"{k}={config[k]}" for k in _KEYS)


def full_space() -> list[KernelConfig]:
    return [dict(zip(_KEYS, values, strict=True))
            for values in _product(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, WARPS, STAGES)]


def _product(*axes: tuple[int, ...]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for axis in axes:
        out = [(*prefix, v) for prefix in out for v in axis]
    return out


def _next_pow2(x: float) -> int:
    n = 1
    while n < x:
        n *= 2
    return n


def candidates(shape: TuneShape, batch_size: int, level: Level = "pruned") -> list[KernelConfig]:
    """The candidates to time for one batch size, in a deterministic order."""
    if level == "full":
        space = full_space()
    elif level == "quick":
        space = [dict(zip(_KEYS, v, strict=True))
                 for v in _product((16, 32, 64, 128), (64, 128), (64, 128), (1, 16), (4, 8), (3, 4))]
    else:
        space = full_space()
    kept = []
    tokens_per_expert = batch_size * shape.top_k / max(shape.E, 1)
    m_cap = max(16, _next_pow2(tokens_per_expert) * 2) if level != "full" else 256
    for cfg in space:
        if shape.block_shape is not None:
            block_n, block_k = shape.block_shape
            if (block_n and block_n % cfg["BLOCK_SIZE_N"]) or (block_k and block_k % cfg["BLOCK_SIZE_K"]):
                continue
        if level == "full":
            kept.append(cfg)
            continue
        if cfg["BLOCK_SIZE_M"] > m_cap:
            continue
        if cfg["BLOCK_SIZE_K"] > max(64, shape.hidden_size) or cfg["BLOCK_SIZE_N"] > max(32, 2 * shape.N):
            continue
        # Small M tiles gain nothing from grouping or from 8 warps; keep the smallest of each.
        if cfg["BLOCK_SIZE_M"] <= 32 and (cfg["GROUP_SIZE_M"] > 16 or cfg["num_warps"] == 8):
            continue
        kept.append(cfg)
    return kept


def space_fingerprint(shape: TuneShape, batch_sizes: list[int], level: Level) -> str:
    """Identifies a search (shape, batch sizes, candidate set) so a checkpoint is only resumed for the same one."""
    body = {"shape": [shape.E, shape.N, shape.hidden_size, shape.top_k, shape.dtype,
                      list(shape.block_shape) if shape.block_shape else None],
            "batch_sizes": sorted(batch_sizes), "level": level,
            "candidates": {bs: len(candidates(shape, bs, level)) for bs in sorted(batch_sizes)}}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
