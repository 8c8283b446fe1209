"""Resolve a model spec (local path, catalog id or alias, hub id) to ModelFacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.files import is_allowed, read_text
from vllm_tune.tools.models.catalog import catalog_model
from vllm_tune.tools.models.config_parse import facts_from_config
from vllm_tune.tools.models.facts import ModelFacts
from vllm_tune.tools.models.hub import fetch_hub_files, index_total_bytes, looks_like_repo_id

_MAX_CONFIG_BYTES = 4 * 1024 * 1024


def _read_json(path: Path) -> dict[str, Any]:
    text = read_text(path, limit=_MAX_CONFIG_BYTES, what="model config")
    try:
        data = json.loads(text)
    except RecursionError:
        raise BadInputError(f"{path} is nested too deeply to be a config.json") from None
    except ValueError as exc:
        raise BadInputError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{path} is not a JSON object")
    return data


def _local_model(path: Path) -> ModelFacts:
    folder = path if path.is_dir() else path.parent
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        raise BadInputError(f"{path} has no config.json")
    config = _read_json(config_path)
    index_path = folder / "model.safetensors.index.json"
    total = index_total_bytes(_read_json(index_path)) if index_path.is_file() else None
    from_files = False
    if total is None:
        shards = list(folder.glob("*.safetensors"))
        total = sum(s.stat().st_size for s in shards) or None  # headers included: a slight overestimate
        from_files = total is not None
    facts = facts_from_config(config, name=str(folder), source="local", status=f"read from {config_path}",
                              sources=[str(config_path)], index_total_bytes=total)
    return facts.model_copy(update={"checkpoint_bytes_source": "files"}) if from_files else facts


def resolve_model(spec: str, *, revision: str | None = None, offline: bool = False,
                  cache_dir: Path | None = None, endpoint: str | None = None) -> ModelFacts:
    """ModelFacts for a local directory or config.json, a catalog id/alias, or a Hugging Face id.

    Order: an existing local path, then the bundled catalog (no network), then the hub (cached on disk; offline
    mode, VLLM_TUNE_OFFLINE=1 or HF_HUB_OFFLINE=1 use only the cache). Unknown models raise BadInputError;
    network failures raise TargetError.
    """
    spec = spec.strip()
    if not spec:
        raise BadInputError("no model given")
    path = Path(spec).expanduser()
    # Over MCP a local path outside the allowed file roots is never probed (tools/files.py).
    if is_allowed(path) and path.exists():
        return _local_model(path)
    if revision is None:
        found = catalog_model(spec)
        if found is not None:
            return found
    if spec.startswith(("/", ".", "~")) or spec.endswith(".json"):
        raise BadInputError(f"{spec} does not exist" if is_allowed(path) else
                            f"{spec} is not under the allowed file roots")
    if not looks_like_repo_id(spec):
        raise BadInputError(f"unknown model {spec!r}: not a local path, a catalog name or an owner/name hub id")
    config, index = fetch_hub_files(spec, revision=revision, offline=offline, cache_dir=cache_dir, endpoint=endpoint)
    catalog_twin = catalog_model(spec)
    notes = [f"catalog also lists {spec}; the hub revision {revision} was used"] if catalog_twin else []
    return facts_from_config(config, name=spec, source="hub", status=f"config.json from the hub @ {revision or 'main'}",
                             sources=[f"hub:{spec}@{revision or 'main'}/config.json"], notes=notes,
                             index_total_bytes=index_total_bytes(index))
