"""One SLO vocabulary for every tool: latency targets in milliseconds judged at a stated percentile.

Targets are named as `vllm bench serve` names its metrics: `ttft` (time to first token), `itl` (inter-token
latency), `tpot` (time per output token, per request) and `e2el` (end-to-end request latency). Two spellings
are read: ours, `ttft=500,itl=15`, and vLLM's `--goodput ttft:500 tpot:50`; the MCP input also takes the older
`ttft_ms` keys. A target is always judged at one percentile, which outputs state beside the verdict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from vllm_tune.tools.errors import BadInputError

SloMetric = Literal["ttft", "itl", "tpot", "e2el"]
SLO_METRICS: tuple[SloMetric, ...] = ("ttft", "itl", "tpot", "e2el")
# vllm bench serve's --goodput takes only these (benchmarks/serve.py, parse_goodput): ITL is not per request.
GOODPUT_METRICS: tuple[SloMetric, ...] = ("ttft", "tpot", "e2el")
SloStatus = Literal["met", "violated", "undecided", "unknown"]
DEFAULT_DIAGNOSE_PERCENTILE = 90.0
DEFAULT_BENCH_PERCENTILE = 99.0
MAX_TARGET_MS = 86_400_000.0

_NAMES = {"ttft": "time to first token", "itl": "inter-token latency", "tpot": "time per output token",
          "e2el": "end-to-end request latency"}


class SloTargets(BaseModel):
    """Latency targets in milliseconds, each optional; `ttft_ms`-style keys are accepted as aliases."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    ttft: float | None = Field(default=None, gt=0, le=MAX_TARGET_MS,
                               validation_alias=AliasChoices("ttft", "ttft_ms"),
                               description=f"{_NAMES['ttft']} target, ms")
    itl: float | None = Field(default=None, gt=0, le=MAX_TARGET_MS,
                              validation_alias=AliasChoices("itl", "itl_ms"),
                              description=f"{_NAMES['itl']} target, ms")
    tpot: float | None = Field(default=None, gt=0, le=MAX_TARGET_MS,
                               validation_alias=AliasChoices("tpot", "tpot_ms"),
                               description=f"{_NAMES['tpot']} target, ms")
    e2el: float | None = Field(default=None, gt=0, le=MAX_TARGET_MS,
                               validation_alias=AliasChoices("e2el", "e2el_ms"),
                               description=f"{_NAMES['e2el']} target, ms")

    def given(self) -> bool:
        return any(v is not None for v in self.items().values())

    def items(self) -> dict[SloMetric, float]:
        """The targets that are set, in the canonical order."""
        return {m: v for m in SLO_METRICS if (v := getattr(self, m)) is not None}

    def as_dict(self) -> dict[str, float]:
        """{'ttft': 500.0, ...}: the plain form run_benchmark and the tuning tools take today."""
        return {str(m): v for m, v in self.items().items()}

    def get(self, metric: SloMetric) -> float | None:
        value: float | None = getattr(self, metric)
        return value

    def as_goodput_args(self) -> list[str]:
        """vllm bench serve's `--goodput` values (`ttft:500 ...`); ITL has no per-request goodput there."""
        return [f"{m}:{v:g}" for m, v in self.items().items() if m in GOODPUT_METRICS]

    def describe(self) -> str:
        return ",".join(f"{m}={v:g}" for m, v in self.items().items()) or "none"


# SloTargets as an input field publishes one flat object (a schema definition per tool would repeat four
# described properties in every tool that takes an SLO); the field's own description names the unit.
SloInput = Annotated[SloTargets, WithJsonSchema({
    "type": "object", "additionalProperties": False,
    "properties": {m: {"type": "number", "exclusiveMinimum": 0} for m in SLO_METRICS}})]


_PAIR = re.compile(r"^\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<sep>[=:])\s*(?P<value>\S+?)\s*(?:ms)?\s*$")


def parse_slo(text: str | Iterable[str], *, allowed: Iterable[str] = SLO_METRICS) -> SloTargets:
    """`ttft=500,itl=15`, `ttft:500 tpot:50` (vLLM's --goodput), `ttft_ms=500`, or a list of such items."""
    parts: list[str] = []
    for chunk in ([text] if isinstance(text, str) else list(text)):
        if not isinstance(chunk, str):
            raise BadInputError(f"bad SLO {chunk!r}: expected METRIC=MS or METRIC:MS, e.g. ttft=500 or ttft:500")
        parts.extend(p for p in re.split(r"[,\s]+", chunk) if p)
    pairs: list[tuple[str, object, str]] = []
    for part in parts:
        m = _PAIR.match(part)
        if m is None:
            raise BadInputError(f"bad SLO {part!r}: expected METRIC=MS or METRIC:MS, e.g. ttft=500 or ttft:500")
        pairs.append((m["key"], m["value"], part))
    return _targets(pairs, allowed)


def _targets(pairs: Iterable[tuple[str, object, str]], allowed: Iterable[str]) -> SloTargets:
    """(key as given, value as given, the item for messages) -> targets; every spelling ends here, so every
    tool refuses the same bad SLO with the same line."""
    keys = set(allowed)
    values: dict[str, float] = {}
    for raw_key, raw, part in pairs:
        key = raw_key.lower().removesuffix("_ms")
        if key not in keys:
            raise BadInputError(f"unknown SLO key {raw_key!r}; expected one of {', '.join(sorted(keys))}")
        try:
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)  # type: ignore[arg-type]  # a number or its text; anything else is refused
        except (TypeError, ValueError):
            raise BadInputError(f"bad SLO {part!r}: {raw!r} is not a number") from None
        if not 0 < value <= MAX_TARGET_MS:
            raise BadInputError(f"SLO {key}={raw} must be a positive number of milliseconds")
        if key in values:
            raise BadInputError(f"SLO {key} given twice")
        values[key] = value
    return SloTargets.model_validate(values)


def goodput_slo(value: object) -> dict[str, float]:
    """The `slo` run_benchmark, what_if and tune take, from any of its spellings: an object of milliseconds
    (`{"ttft": 500}`, `ttft_ms` keys too), vLLM's `ttft:500 tpot:50`, ours `ttft=500,tpot=50`, or a list of
    such items. Canonical `{"ttft": 500.0, ...}` in SLO order; only TTFT, TPOT and E2EL, because a request is
    "good" when it meets every target, per request, as vllm bench serve's --goodput counts it."""
    if value is None:
        return {}
    if isinstance(value, SloTargets):
        targets = value
    elif isinstance(value, dict):
        targets = _targets(((str(k), v, f"{k}={v}") for k, v in value.items()), SLO_METRICS)
    elif isinstance(value, str | list | tuple):
        targets = parse_slo(value)
    else:
        raise BadInputError(f"bad SLO {value!r}: expected an object of milliseconds such as {{\"ttft\": 500}}, or "
                            "ttft:500 tpot:50")
    require_goodput_metrics(targets)
    return targets.as_dict()


def _goodput_field(value: object) -> dict[str, float]:
    try:
        return goodput_slo(value)
    except BadInputError as exc:  # pydantic reports a ValueError as this field's one-line error
        raise ValueError(str(exc)) from None


# The `slo` field of run_benchmark, what_if and tune_start: parsed by goodput_slo, published over MCP as a plain
# object of numbers (the keys are in each field's description).
GoodputSlo = Annotated[dict[str, float], BeforeValidator(_goodput_field)]


def check_search_slo(slo: dict[str, float], search_capacity: bool) -> None:
    """A capacity search looks for the highest load that meets the SLO, so it needs one (run_benchmark and
    what_if both check it here)."""
    if search_capacity and not slo:
        raise ValueError("search_capacity needs an SLO, e.g. slo={'ttft': 500} (or ttft:500)")


def parse_percentile(text: str | float) -> float:
    """`p95`, `95` or `99.9` -> 95.0 / 99.9; strictly between 0 and 100."""
    raw = text.strip().lower().removeprefix("p") if isinstance(text, str) else text
    try:
        value = float(raw)
    except ValueError:
        raise BadInputError(f"bad SLO percentile {text!r}: expected e.g. p90, 95 or 99") from None
    if not 0 < value < 100:
        raise BadInputError(f"SLO percentile {text!r} must lie strictly between 0 and 100")
    return value


def percentile_label(p: float) -> str:
    """'p99' for 99, 'p99.9' for 99.9 (as vLLM prints them)."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p:g}"


def require_goodput_metrics(targets: SloTargets) -> None:
    """A goodput count (per request, as vLLM defines it) can only use TTFT, TPOT and E2EL targets."""
    if targets.itl is not None:
        raise BadInputError("goodput counts requests meeting every target, per request as vllm bench serve "
                            "does; ITL is not a per-request value, use tpot")


class SloCheck(BaseModel):
    """One target judged at one percentile, with what decided it."""

    metric: SloMetric
    target_ms: float
    percentile: float
    status: SloStatus
    observed_ms: float | None = Field(default=None, description="point estimate at the percentile, if one exists")
    lower_ms: float | None = Field(default=None, description="the value is above this (bucket edge)")
    upper_ms: float | None = Field(default=None, description="the value is at most this (bucket edge)")
    decided_by: str = Field(description="what the status rests on")
    share_within_target: float | None = Field(default=None, description="fraction of requests at or below target")


def judge_bounds(metric: SloMetric, target_ms: float, percentile: float, *, lower_ms: float | None,
                 upper_ms: float | None, observed_ms: float | None = None) -> SloCheck:
    """Judge a percentile known only to lie in (lower, upper]: met when the whole range is below the target,
    violated when it is above, undecided when the range reaches the target.

    The upper edge counts as reaching the target: a server-side percentile exactly at the target has no margin
    for the time the client sees on top of it (HTTP, tokenisation, streaming)."""
    label = percentile_label(percentile)
    if lower_ms is None and upper_ms is None:
        return SloCheck(metric=metric, target_ms=target_ms, percentile=percentile, status="unknown",
                        decided_by="no observations")
    span = f"{lower_ms or 0:g}-{'inf' if upper_ms is None else f'{upper_ms:g}'} ms"
    if upper_ms is not None and upper_ms < target_ms:
        status: SloStatus = "met"
        why = f"{metric} {label} is at most {upper_ms:g} ms, below the {target_ms:g} ms target"
    elif lower_ms is not None and lower_ms >= target_ms:
        status = "violated"
        why = f"{metric} {label} is above {lower_ms:g} ms, at or over the {target_ms:g} ms target"
    else:
        status = "undecided"
        why = f"{metric} {label} lies in {span}, a range that reaches the {target_ms:g} ms target"
    return SloCheck(metric=metric, target_ms=target_ms, percentile=percentile, status=status,
                    observed_ms=observed_ms, lower_ms=lower_ms, upper_ms=upper_ms, decided_by=why)


def judge_value(metric: SloMetric, target_ms: float, percentile: float, observed_ms: float | None) -> SloCheck:
    """Judge a percentile measured exactly (per-request data, e.g. a benchmark's records)."""
    if observed_ms is None:
        return SloCheck(metric=metric, target_ms=target_ms, percentile=percentile, status="unknown",
                        decided_by="no observations")
    label = percentile_label(percentile)
    met = observed_ms <= target_ms
    return SloCheck(metric=metric, target_ms=target_ms, percentile=percentile,
                    status="met" if met else "violated", observed_ms=observed_ms, lower_ms=observed_ms,
                    upper_ms=observed_ms,
                    decided_by=f"{metric} {label} {observed_ms:.1f} ms {'<=' if met else '>'} {target_ms:g} ms")


__all__ = ["DEFAULT_BENCH_PERCENTILE", "DEFAULT_DIAGNOSE_PERCENTILE", "GOODPUT_METRICS", "SLO_METRICS", "GoodputSlo",
           "SloCheck", "SloMetric", "SloStatus", "SloTargets", "check_search_slo", "goodput_slo", "judge_bounds",
           "judge_value", "parse_percentile", "parse_slo", "percentile_label", "require_goodput_metrics"]
