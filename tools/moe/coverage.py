"""Where vLLM would find a tuned fused-MoE config, in its own lookup order, and what exists nearby.

Lookup order (vLLM 0.32.0 ``fused_moe.py`` L1131-1160, ``get_moe_configs``): ``$VLLM_TUNED_CONFIG_FOLDER/<name>``
first, then ``vllm/model_executor/layers/fused_moe/configs/<name>`` inside the installed package; the first file
that exists wins. We find the package folder without importing vllm or torch, and fall back on a bundled index of
the names each released vLLM version ships (``knowledge/moe_configs/index-<version>.json``, built by
``scripts/build_moe_index.py``).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from packaging.version import InvalidVersion, Version

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.naming import ConfigKey, parse_config_file_name

CONFIGS_SUBDIR = ("model_executor", "layers", "fused_moe", "configs")
Status = Literal["tuned", "shipped", "missing"]


def index_dir() -> Path:
    import vllm_tune.knowledge as knowledge

    return Path(knowledge.__file__).parent / "moe_configs"


def available_index_versions() -> list[str]:
    versions = []
    for path in index_dir().glob("index-*.json"):
        versions.append(path.stem.removeprefix("index-"))
    return sorted(versions, key=_version_sort_key)


def _version_sort_key(text: str) -> tuple[int, Version | str]:
    try:
        return (1, Version(text))
    except InvalidVersion:
        return (0, text)


def load_index(vllm_version: str | None = None) -> tuple[str, list[str]] | None:
    """(version, shipped file names) from the bundled index: the exact version, else the newest index at or below
    it, else the newest one. None when no index is bundled."""
    versions = available_index_versions()
    if not versions:
        return None
    chosen = versions[-1]
    if vllm_version:
        at_or_below = [v for v in versions if _version_sort_key(v) <= _version_sort_key(vllm_version)]
        chosen = at_or_below[-1] if at_or_below else versions[0]
    data = json.loads((index_dir() / f"index-{chosen}.json").read_text())
    return chosen, [str(name) for name in data["files"]]


def find_package_configs_dir(python: str | None = None) -> Path | None:
    """The installed vLLM's shipped configs folder, found without importing vllm: in this interpreter via
    ``importlib.util.find_spec`` (locates the package, does not run it), or in another interpreter ``python``."""
    root: str | None = None
    if python:
        probe = ("import importlib.util as u; s = u.find_spec('vllm'); "
                 "print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')")
        try:
            done = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BadInputError(f"cannot run {python}: {exc}") from exc
        root = done.stdout.strip() or None
    else:
        spec = importlib.util.find_spec("vllm")
        if spec is not None and spec.submodule_search_locations:
            root = next(iter(spec.submodule_search_locations))
    if not root:
        return None
    folder = Path(root).joinpath(*CONFIGS_SUBDIR)
    return folder if folder.is_dir() else None


def installed_vllm_version(configs_dir: Path) -> str | None:
    """The version of the vLLM that owns ``configs_dir``, from its dist-info (no import)."""
    site = configs_dir.parents[len(CONFIGS_SUBDIR)]
    for meta in sorted(site.glob("vllm*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


@dataclass
class Nearest:
    file_name: str
    where: str
    relation: str
    meaning: str


@dataclass
class Coverage:
    status: Status
    found_at: str | None
    searched: list[str]
    shipped_source: str | None
    nearest: list[Nearest] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)


def _batch_sizes(path: Path) -> list[int]:
    try:
        body = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return []
    return sorted(int(k) for k in body if str(k).isdigit()) if isinstance(body, dict) else []


def _names_in(folder: Path) -> list[str]:
    try:
        return sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))
    except OSError:
        return []


def check_coverage(key: ConfigKey, *, tuned_folder: str | None = None, package_dir: Path | None = None,
                   vllm_version: str | None = None, max_nearest: int = 6) -> Coverage:
    """tuned (in the tuned folder) / shipped (in the package or the release index) / missing, with neighbours."""
    name = key.file_name()
    searched: list[str] = []
    pools: list[tuple[str, list[str]]] = []
    if tuned_folder:
        path = Path(tuned_folder) / name
        searched.append(str(path))
        if path.is_file():
            return Coverage("tuned", str(path), searched, None, batch_sizes=_batch_sizes(path))
        pools.append((f"tuned folder {tuned_folder}", _names_in(Path(tuned_folder))))
    shipped: list[str]
    source: str
    if package_dir is not None:
        searched.append(str(package_dir / name))
        shipped, source = _names_in(package_dir), f"installed vLLM configs folder {package_dir}"
    else:
        index = load_index(vllm_version)
        if index is None:
            shipped, source = [], "no installed vLLM and no bundled index"
        else:
            shipped, source = index[1], f"bundled index of vLLM {index[0]}"
            searched.append(f"<vllm {index[0]} package>/configs/{name}")
    if name in shipped:
        sizes = _batch_sizes(package_dir / name) if package_dir is not None else []
        return Coverage("shipped", str(package_dir / name) if package_dir else source, searched, source,
                        batch_sizes=sizes)
    pools.append((source, shipped))
    return Coverage("missing", None, searched, source, nearest_configs(key, pools, limit=max_nearest))


def nearest_configs(key: ConfigKey, pools: list[tuple[str, list[str]]], *, limit: int = 6) -> list[Nearest]:
    """Existing configs closest to ``key``, best first: same shape and dtype on another GPU; same GPU and dtype
    with the nearest N; same shape and GPU in another dtype."""
    scored: list[tuple[tuple[int, float], Nearest]] = []
    seen: set[str] = set()
    for where, names in pools:
        for name in names:
            parsed = parse_config_file_name(name)
            if parsed is None or parsed[1] or parsed[0].backend != key.backend or name in seen:
                continue
            other = parsed[0]
            same_quant = other.dtype == key.dtype and other.block_shape == key.block_shape
            if other.E == key.E and other.N == key.N and same_quant and other.device_name != key.device_name:
                same_vendor = other.device_name.split("_")[0] == key.device_name.split("_")[0]
                rank, rel = (0, 0.0 if same_vendor else 1.0), "same E, N and dtype on another GPU"
                meaning = ("tile sizes tuned for a different GPU; usable as a starting point (copy it under this "
                           "GPU's file name) but not tuned for this GPU's SM count and memory")
            elif other.device_name == key.device_name and same_quant and other.E == key.E:
                rank = (1, abs(other.N - key.N) / max(key.N, 1))
                rel = f"same GPU, E and dtype, N={other.N} instead of {key.N}"
                meaning = "a different shard size (another TP/EP layout); tiles rarely transfer exactly"
            elif other.device_name == key.device_name and other.E == key.E and other.N == key.N:
                rank, rel = (2, 0.0), f"same GPU and shape, dtype {other.dtype or 'bf16/fp16'}"
                meaning = "a different weight dtype; the best tiles differ with the quantisation"
            else:
                continue
            seen.add(name)
            scored.append((rank, Nearest(name, where, rel, meaning)))
    scored.sort(key=lambda item: (item[0], item[1].file_name))
    # Keep every kind of neighbour visible: at most a third of the slots for one kind, then fill up.
    per_kind = max(1, limit // 3)
    picked: list[Nearest] = []
    counts: dict[int, int] = {}
    for rank, near in scored:
        if counts.get(rank[0], 0) < per_kind and len(picked) < limit:
            picked.append(near)
            counts[rank[0]] = counts.get(rank[0], 0) + 1
    for _, near in scored:
        if len(picked) >= limit:
            break
        if near not in picked:
            picked.append(near)
    return picked

