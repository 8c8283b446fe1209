"""The bundled model and GPU catalogs (knowledge/catalog/*.yaml), loaded once per process."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import yaml

from vllm_tune.tools.errors import BadInputError, KnowledgeError
from vllm_tune.tools.kb.loader import load_yaml
from vllm_tune.tools.models.config_parse import facts_from_config
from vllm_tune.tools.models.facts import GpuSpec, Interconnect, InterconnectKind, ModelFacts

CATALOG_DIR = Path(__file__).resolve().parents[2] / "knowledge" / "catalog"


def _norm(name: str) -> str:
    """Case-, space- and punctuation-insensitive key for catalog lookups."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def _read(name: str, key: str) -> list[dict[str, Any]]:
    path = CATALOG_DIR / name
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise KnowledgeError(f"catalog {path} cannot be read: {exc}") from exc
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise KnowledgeError(f"catalog {path} has no '{key}' list")
    return [item for item in items if isinstance(item, dict)]


@functools.cache
def model_entries() -> dict[str, dict[str, Any]]:
    """Raw catalog entries keyed by every normalised id and alias."""
    index: dict[str, dict[str, Any]] = {}
    for entry in _read("models.yaml", "models"):
        for key in [entry["id"], entry["id"].split("/")[-1], *entry.get("aliases", [])]:
            index.setdefault(_norm(str(key)), entry)
    return index


def catalog_model_ids() -> list[str]:
    """Every model id in the catalog, in file order."""
    seen: dict[str, None] = {}
    for entry in model_entries().values():
        seen.setdefault(str(entry["id"]), None)
    return list(seen)


def catalog_model(spec: str) -> ModelFacts | None:
    """ModelFacts for a catalog id or alias, or None when the catalog does not know it."""
    entry = model_entries().get(_norm(spec))
    if entry is None:
        return None
    return _facts_from_entry(str(entry["id"]))


@functools.cache
def _facts_from_entry(model_id: str) -> ModelFacts:
    entry = model_entries()[_norm(model_id)]
    return facts_from_config(
        entry["config"], name=model_id, source="catalog", status=str(entry.get("status", "")),
        sources=[str(s) for s in entry.get("sources", [])], notes=[str(n) for n in entry.get("notes", [])],
        params_total_reported=entry.get("params_total_b"), params_active_reported=entry.get("params_active_b"),
    )


@functools.cache
def gpu_entries() -> dict[str, GpuSpec]:
    """GpuSpec per normalised short name, alias, catalog name and full device name."""
    index: dict[str, GpuSpec] = {}
    for raw in _read("gpus.yaml", "gpus"):
        notes = [str(n) for n in raw.get("notes", [])]
        memory = raw.get("memory_gib")
        estimated = False
        if memory is None and raw.get("memory_gb"):
            memory = float(raw["memory_gb"]) * 1e9 / 2**30
            estimated = True
            notes.append("memory_gib derived from the labelled GB (no torch printout found)")
        if memory is None:
            continue  # an entry with no memory figure cannot be planned for
        ic = raw.get("interconnect") or {}
        kind: InterconnectKind = ic.get("kind") or "unknown"
        spec = GpuSpec(
            name=str(raw["name"]), full_name=raw.get("full_name"), vendor=raw.get("vendor", "other"),
            memory_gib=float(memory), memory_estimated=estimated, bandwidth_tbs=raw.get("bandwidth_tbs"),
            tflops={str(k): float(v) for k, v in (raw.get("tflops") or {}).items()},
            interconnect=Interconnect(kind=kind, description=ic.get("description"),
                                      bandwidth_gbs=ic.get("bandwidth_gbs_bidirectional")),
            gpus_per_node=int(raw.get("gpus_per_node", 8)), vllm_config_device_name=raw.get("vllm_config_device_name"),
            sources=[str(s) for s in raw.get("sources", [])], notes=notes,
        )
        names = [raw["name"], raw.get("catalog_name"), raw.get("full_name"), *raw.get("aliases", [])]
        for name in names:
            if name:
                index.setdefault(_norm(str(name)), spec)
    return index


def gpu_names() -> list[str]:
    """Short names of every plannable GPU in the catalog."""
    return sorted({spec.name for spec in gpu_entries().values()})


def get_gpu(name: str) -> GpuSpec:
    """A catalog GPU by short name (H100, MI300X...), catalog name or torch device name; case-insensitive."""
    key = _norm(name)
    index = gpu_entries()
    spec = index.get(key) or index.get(_norm(key.removeprefix("nvidia-").removeprefix("amd-instinct-")))
    if spec is None:
        raise BadInputError(f"unknown GPU {name!r}; known: {', '.join(gpu_names())} (or give a custom spec)")
    return spec


def custom_gpu(name: str, *, memory_gib: float, bandwidth_tbs: float | None = None,
               tflops_bf16: float | None = None, tflops_fp8: float | None = None,
               interconnect: InterconnectKind = "unknown", interconnect_gbs: float | None = None,
               gpus_per_node: int = 8) -> GpuSpec:
    """A GpuSpec from user-supplied numbers (sources say so)."""
    if memory_gib <= 0 or memory_gib > 10_000:
        raise BadInputError(f"custom GPU memory {memory_gib} GiB is not plausible")
    tflops = {k: v for k, v in {"bf16": tflops_bf16, "fp8": tflops_fp8}.items() if v}
    return GpuSpec(name=name, vendor="other", memory_gib=memory_gib, bandwidth_tbs=bandwidth_tbs, tflops=tflops,
                   interconnect=Interconnect(kind=interconnect, bandwidth_gbs=interconnect_gbs),
                   gpus_per_node=gpus_per_node, sources=["user-supplied"])
