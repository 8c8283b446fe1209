"""Published measurements of real serving runs (knowledge/measured/*.yaml), typed and loaded once per process.

Each YAML file holds one source: a `source:` block (where the numbers were read, which engine produced them), an
optional `defaults:` block (row fields shared by every row of the file, such as the GPU or dtype of a table) and a
`rows:` list. A row inherits the file's source, engine and defaults unless it names its own, and must say where in
the source its numbers sit (`location`). Throughput is kept twice: exactly as the source prints it (`raw`) and
normalised to output tokens per second for the whole deployment (`output_tok_s`), so a reader can check the
normalisation against the page. Rows whose model or GPU the bundled catalogs do not know say so
(`model_in_catalog` / `gpu_in_catalog` false) instead of being dropped: the planner skips them, the table keeps them.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vllm_tune.tools.errors import KnowledgeError

MEASURED_DIR = Path(__file__).resolve().parents[2] / "knowledge" / "measured"

Engine = Literal["vllm", "tensorrt-llm", "sglang"]
Stat = Literal["mean", "median", "p50", "p90", "p95", "p99", "single", "unspecified"]
# How the source states its throughput: for the whole deployment, per GPU, or per user (one request's stream).
ThroughputUnit = Literal["tok/s", "tok/s/gpu", "tok/s/user"]
# "unspecified": the source does not say whether its figure counts output or input+output tokens; such a figure is
# kept (it bounds the output rate from above) but never normalised into output_tok_s.
ThroughputScope = Literal["output", "total", "unspecified"]
# static_batch: a fixed batch started together and run to the end (vllm bench latency); offline: every request
# queued at once and served by continuous batching (vllm bench throughput, trtllm-bench throughput).
LoadKind = Literal["concurrency", "request_rate", "max_batch", "static_batch", "offline"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    """Where a number was read: a web page (url) or a file in a repository at a commit."""

    title: str | None = None
    url: str | None = None
    repo: str | None = Field(default=None, description="owner/name on GitHub")
    path: str | None = None
    commit: str | None = None
    date: str | None = Field(default=None, description="publication date or the date the file was read")
    location: str = Field(min_length=3, description="table / row / section inside the source")

    @model_validator(mode="after")
    def _addressable(self) -> Source:
        if not self.url and not (self.repo and self.path):
            raise ValueError("a source needs a url, or repo and path")
        return self

    def cite(self) -> str:
        """One-line citation: repo:path@commit (or the url), then the location."""
        if self.repo and self.path:
            where = f"{self.repo}:{self.path}" + (f"@{self.commit}" if self.commit else "")
        else:
            where = str(self.url)
        return f"{where} ({self.location})"


class Latency(_Strict):
    """One latency figure as the source gives it."""

    ms: float = Field(gt=0)
    stat: Stat


class RawThroughput(_Strict):
    """Throughput exactly as printed by the source, before normalisation."""

    value: float = Field(gt=0)
    unit: ThroughputUnit
    scope: ThroughputScope = Field(default="output", description="output tokens only, input+output tokens, or not "
                                                                 "stated by the source")


class Load(_Strict):
    """The offered load: requests in flight, an arrival rate, an engine batch cap, or an offline run."""

    kind: LoadKind
    value: float | None = Field(default=None, gt=0, description="concurrency, requests/s or (max) batch size")
    num_prompts: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _value_given(self) -> Load:
        if self.kind != "offline" and self.value is None:
            raise ValueError(f"load kind {self.kind!r} needs a value")
        return self


class MeasuredRow(_Strict):
    """One published measurement of a serving run."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    model: str = Field(description="Hugging Face id of the checkpoint (or its base model when the source names "
                                   "only the family); see model_in_catalog")
    model_in_catalog: bool = Field(default=True,
                                   description="false when knowledge/catalog/models.yaml does not know the model")
    checkpoint: str | None = Field(default=None, description="the exact checkpoint the source ran, when it differs "
                                                             "from model (a quantised re-publication, a revision)")
    moe: bool
    gpu: str = Field(description="GPU short name as in knowledge/catalog/gpus.yaml (H100, H200, B200, MI300X...)")
    gpu_in_catalog: bool = True
    gpu_count: int = Field(ge=1)
    tp: int = Field(ge=1)
    pp: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1, description="data-parallel replicas (engine DP or separate servers)")
    ep: int = Field(default=1, ge=1, description="expert-parallel group size; 1 = experts not split by EP")
    layout_label: str | None = Field(default=None, description="the source's own name for the layout (TP2, DEP4...)")
    layout_note: str | None = Field(default=None, description="required when tp*pp*dp != gpu_count")
    weights_dtype: str = Field(description="bf16, fp16, fp8, nvfp4, mxfp4, int4-awq, ...")
    kv_cache_dtype: str | None = None
    engine: Engine
    engine_version: str | None = None
    isl: int = Field(ge=1, description="input tokens per request (mean when the source uses a distribution)")
    osl: int = Field(ge=1, description="output tokens per request")
    load: Load
    raw: RawThroughput | None = None
    output_tok_s: float | None = Field(default=None, gt=0,
                                       description="output tokens/s for the whole deployment (all gpu_count GPUs)")
    tpot_ms: Latency | None = None
    ttft_ms: Latency | None = None
    itl_ms: Latency | None = None
    e2e_ms: Latency | None = None
    source: Source
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        # Files give the figure as printed; the deployment-wide value is derived here so it is never hand-computed.
        if isinstance(data, dict) and data.get("output_tok_s") is None and isinstance(data.get("raw"), dict):
            try:
                raw = RawThroughput.model_validate(data["raw"])
                load = Load.model_validate(data.get("load") or {})
                count = int(data["gpu_count"])
            except (ValidationError, KeyError, TypeError, ValueError):
                return data  # the field validators report the real problem
            if raw.scope == "output":
                data = {**data, "output_tok_s": normalised_output_tok_s(raw, gpu_count=count, load=load)}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> MeasuredRow:
        if self.tp * self.pp * self.dp != self.gpu_count and not self.layout_note:
            raise ValueError(f"tp*pp*dp = {self.tp * self.pp * self.dp} != gpu_count {self.gpu_count} "
                             "without a layout_note")
        if self.raw is None and not any((self.tpot_ms, self.ttft_ms, self.itl_ms, self.e2e_ms)):
            raise ValueError("a row needs a throughput or at least one latency figure")
        if self.output_tok_s is not None and self.raw is None:
            raise ValueError("output_tok_s needs the raw figure it was read from")
        if self.raw is not None and self.raw.scope != "output" and self.output_tok_s is not None:
            raise ValueError(f"output_tok_s cannot be derived from a {self.raw.scope!r} throughput")
        if self.raw is not None and self.raw.scope == "output":
            expected = normalised_output_tok_s(self.raw, gpu_count=self.gpu_count, load=self.load)
            if expected is None or self.output_tok_s is None or not math.isclose(
                    expected, self.output_tok_s, rel_tol=1e-3):
                raise ValueError(f"output_tok_s {self.output_tok_s} does not follow from raw "
                                 f"{self.raw.value} {self.raw.unit} on {self.gpu_count} GPUs ({expected})")
        return self

    @property
    def output_tok_s_per_gpu(self) -> float | None:
        return None if self.output_tok_s is None else self.output_tok_s / self.gpu_count

    @property
    def replicas(self) -> int:
        return self.dp


def normalised_output_tok_s(raw: RawThroughput, *, gpu_count: int, load: Load) -> float | None:
    """Deployment-wide output tok/s from a figure as printed; per-user figures need a known concurrency."""
    if raw.unit == "tok/s":
        return raw.value
    if raw.unit == "tok/s/gpu":
        return raw.value * gpu_count
    if load.kind == "concurrency" and load.value is not None:
        return raw.value * load.value
    return None


def _merge_source(defaults: dict[str, Any], row: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    merged = {**shared, **row}
    if "notes" in shared and "notes" in row:
        merged["notes"] = [*shared["notes"], *row["notes"]]
    for key in ("engine", "engine_version"):
        if key not in merged and key in defaults:
            merged[key] = defaults[key]
    source = {k: v for k, v in defaults.items() if k not in ("engine", "engine_version")}
    own = merged.get("source") or {}
    if "location" in merged:
        own = {**own, "location": merged.pop("location")}
    merged["source"] = {**source, **own}
    return merged


def load_file(path: Path) -> list[MeasuredRow]:
    """Rows of one source file, validated."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise KnowledgeError(f"measured table {path} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise KnowledgeError(f"measured table {path} has no 'rows' list")
    defaults = data.get("source") or {}
    if not isinstance(defaults, dict):
        raise KnowledgeError(f"measured table {path}: 'source' must be a mapping")
    shared = data.get("defaults") or {}
    if not isinstance(shared, dict):
        raise KnowledgeError(f"measured table {path}: 'defaults' must be a mapping")
    rows: list[MeasuredRow] = []
    for raw in data["rows"]:
        if not isinstance(raw, dict):
            raise KnowledgeError(f"measured table {path}: every row must be a mapping")
        try:
            rows.append(MeasuredRow.model_validate(_merge_source(defaults, raw, shared)))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise KnowledgeError(f"measured table {path} row {raw.get('id')!r}: "
                                 f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from exc
    return rows


def load_measured(directory: Path | None = None) -> list[MeasuredRow]:
    """Every row of the measured-results table, in file then row order; ids are unique across files."""
    if directory is None:
        return list(_load_bundled())
    return _load_dir(directory)


@functools.cache
def _load_bundled() -> tuple[MeasuredRow, ...]:
    return tuple(_load_dir(MEASURED_DIR))


def _load_dir(directory: Path) -> list[MeasuredRow]:
    rows: list[MeasuredRow] = []
    seen: dict[str, Path] = {}
    for path in sorted(directory.glob("*.yaml")):
        for row in load_file(path):
            if row.id in seen:
                raise KnowledgeError(f"measured row id {row.id!r} appears in {seen[row.id].name} and {path.name}")
            seen[row.id] = path
            rows.append(row)
    return rows


def throughput_rows(rows: list[MeasuredRow] | None = None) -> list[MeasuredRow]:
    """Rows with a deployment-wide output throughput (the ones an estimator can be fitted to)."""
    return [r for r in (load_measured() if rows is None else rows) if r.output_tok_s is not None]
