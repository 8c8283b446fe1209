"""Find and read benchmark results: a result JSON, a run folder, or a run id under the results directory.

Three formats are told apart: our own benchmark result (vllm bench serve fields plus `client_check`,
`server` and `provenance`), our capacity-search result, and a plain `vllm bench serve --save-result`
file, with or without `--save-detailed` per-request arrays. Files are only ever read.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from vllm_tune.tools.bench.store import ResultStore, results_dir
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.files import allowed, is_allowed, read_bytes

RunFormat = Literal["vllm-tune-benchmark", "vllm-tune-capacity", "vllm-bench-serve"]

MAX_FILE_BYTES = 256 * 1024 * 1024  # a 10k-request detailed result is a few MB; anything far larger is not one
_RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
_LATENCY_KEY = re.compile(r"^(mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2el)_ms$")


@dataclass
class LoadedRun:
    ref: str
    path: Path
    format: RunFormat
    data: dict[str, Any]
    detailed: bool = False
    # Per successful request, seconds, aligned by request where both exist.
    ttfts: list[float] | None = None
    e2els: list[float] | None = None
    tpots: list[float] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def provenance(self) -> dict[str, Any]:
        prov = self.data.get("provenance")
        return prov if isinstance(prov, dict) else {}

    @property
    def completed(self) -> int:
        return _int(self.data.get("completed"))

    @property
    def failed(self) -> int:
        return _int(self.data.get("failed"))


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError, OverflowError):  # Infinity and NaN are numbers in JSON text, not counts
        return 0


def resolve(ref: str, results: str | None = None) -> Path:
    """The result.json a reference points at; one clear line when it points at nothing."""
    text = ref.strip()
    if not text:
        raise BadInputError("empty run reference; give a result JSON, a run folder or a run id")
    # Over MCP a path outside the allowed roots is refused before it is probed, so the answer says nothing
    # about whether it exists. A bare run id is looked up under the results folder instead.
    bare_id = _RUN_ID.match(text) is not None
    if not bare_id or is_allowed(text):
        path = allowed(text, "run reference")
        if path.is_file():
            return path
        if path.is_dir():
            inner = path / "result.json"
            if inner.is_file():
                return inner
            raise BadInputError(f"{text}: folder has no result.json (is the run still going, or did it fail?)")
    if _RUN_ID.match(text):
        store = ResultStore(results_dir(results))
        inner = store.find_run(text) / "result.json"
        if inner.is_file():
            return inner
        state: str = "unknown"
        with contextlib.suppress(BadInputError, ValueError):  # a torn status file still deserves one line
            state = store.read_status(text).state
        raise BadInputError(f"run {text} has no result.json yet (state: {state})")
    raise BadInputError(f"{text}: no such file, run folder or run id")


def _read_json(path: Path, ref: str) -> dict[str, Any]:
    raw = read_bytes(path, limit=MAX_FILE_BYTES, what="benchmark result")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise BadInputError(f"{ref}: JSON nested too deeply to be a benchmark result") from None
    except (ValueError, UnicodeDecodeError):
        raise BadInputError(f"{ref}: not valid JSON, so not a benchmark result") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{ref}: not a benchmark result (the JSON is not an object)")
    return data


def classify(data: dict[str, Any], ref: str) -> RunFormat:
    tag = data.get("vllm_tune")
    kind = tag.get("kind") if isinstance(tag, dict) else None
    if kind == "capacity" or (isinstance(data.get("capacity"), dict) and "completed" not in data):
        if not isinstance(data.get("capacity"), dict):
            raise BadInputError(f"{ref}: a capacity result without its capacity block")
        return "vllm-tune-capacity"
    if "requests_per_second" in data and "request_throughput" not in data:
        # Releases before 0.10 used this name for the same quantity.
        data["request_throughput"] = data["requests_per_second"]
    has_aggregates = all(k in data for k in ("completed", "duration", "request_throughput"))
    if not has_aggregates or not any(_LATENCY_KEY.match(k) for k in data):
        raise BadInputError(f"{ref}: not a benchmark result (needs completed, duration, request_throughput and "
                            "mean_/pNN_<metric>_ms fields, as vllm bench serve --save-result writes)")
    if kind == "benchmark" or isinstance(data.get("provenance"), dict):
        return "vllm-tune-benchmark"
    return "vllm-bench-serve"


def _floats(value: Any) -> list[float] | None:
    if not isinstance(value, list):
        return None
    try:
        out = [float(v) for v in value]
    except (TypeError, ValueError, OverflowError):
        return None
    # Infinity or NaN (Python's json reads both) make every statistic meaningless.
    return out if all(math.isfinite(v) for v in out) else None


def _success_mask(data: dict[str, Any], n: int) -> list[bool] | None:
    """Which of n per-request entries succeeded, for vllm's detailed arrays that also list failures."""
    errors = data.get("errors")
    if isinstance(errors, list) and len(errors) == n:
        return [not e for e in errors]
    return None


def _arrays(run: LoadedRun) -> None:
    """Keep per-request arrays only when they line up with the successful requests; say why not otherwise."""
    d = run.data
    completed, failed = run.completed, run.failed
    mask: list[bool] | None = None
    found: dict[str, list[float]] = {}
    for key in ("ttfts", "latencies"):
        values = _floats(d.get(key))
        if values is None:
            continue
        if len(values) == completed:
            found[key] = values
            continue
        if failed and len(values) == completed + failed:
            mask = mask or _success_mask(d, len(values))
            if mask is not None:
                found[key] = [v for v, ok in zip(values, mask, strict=True) if ok]
                continue
        run.notes.append(f"`{key}` holds {len(values)} values for {completed} completed requests (truncated or "
                         "mixed with failures), so it is not used")
    run.ttfts = found.get("ttfts")
    run.e2els = found.get("latencies")
    out_lens = d.get("output_lens")
    raw_ttfts, raw_lat = _floats(d.get("ttfts")), _floats(d.get("latencies"))
    if isinstance(out_lens, list) and raw_ttfts and raw_lat and len(out_lens) == len(raw_ttfts) == len(raw_lat):
        ok = _success_mask(d, len(out_lens)) or [True] * len(out_lens)
        tpots: list[float] = []
        for lat, first, n_out, good in zip(raw_lat, raw_ttfts, out_lens, ok, strict=True):
            # Same definition as vllm bench serve: one-token outputs have no TPOT.
            if good and isinstance(n_out, int) and n_out > 1:
                tpots.append((lat - first) / (n_out - 1))
        run.tpots = tpots or None


def load_run(ref: str, results: str | None = None) -> LoadedRun:
    path = resolve(ref, results)
    data = _read_json(path, ref)
    fmt = classify(data, ref)
    run = LoadedRun(ref=ref, path=path, format=fmt, data=data)
    if fmt == "vllm-tune-capacity":
        said = data["capacity"].get("confidence")
        if said:
            run.notes.append(f"search said: {said}")
        return run
    run.detailed = fmt == "vllm-bench-serve" and any(k in data for k in ("itls", "input_lens", "output_lens"))
    _arrays(run)
    return run


def load_runs(refs: list[str], results: str | None = None) -> list[LoadedRun]:
    return [load_run(ref, results) for ref in refs]
