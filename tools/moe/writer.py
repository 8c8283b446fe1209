"""Write tuned configs in vLLM's file format: a JSON object keyed by batch size (as text) -> kernel parameters, under
the exact file name vLLM will look for. vLLM drops an optional ``triton_version`` key when loading
(fused_moe.py L1155-1157 @0.32.0)."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.naming import ConfigKey
from vllm_tune.tools.moe.search_space import KernelConfig
from vllm_tune.tools.moe.tuner import write_json_atomic

REQUIRED_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def config_body(best: dict[int, KernelConfig], triton_version: str | None = None) -> dict[str, object]:
    body: dict[str, object] = {}
    if triton_version:
        body["triton_version"] = triton_version
    for bs in sorted(best):
        cfg = best[bs]
        missing = [k for k in REQUIRED_KEYS if k not in cfg]
        if missing:
            raise BadInputError(f"config for batch size {bs} lacks {', '.join(missing)}")
        body[str(bs)] = {k: int(v) for k, v in cfg.items()}
    return body


def write_config(folder: Path, key: ConfigKey, best: dict[int, KernelConfig], *, triton_version: str | None = None,
                 merge: bool = True) -> Path:
    """Write (or, with ``merge``, extend an existing file with) tuned configs; returns the file path."""
    if not best:
        raise BadInputError("nothing to write: no batch size has a measured config")
    path = folder / key.file_name()
    merged: dict[int, KernelConfig] = {}
    if merge and path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise BadInputError(f"existing config {path} is unreadable: {exc}") from exc
        merged = {int(k): v for k, v in old.items() if k != "triton_version"}
    merged.update(best)
    write_json_atomic(path, config_body(merged, triton_version))
    return path
