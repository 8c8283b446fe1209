"""Read Prometheus exposition text with prometheus_client's own parser (never by hand)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from vllm_tune.tools.errors import BadInputError

MAX_TEXT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RawSample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp: float | None = None


def _short(text: str, limit: int = 80) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def iter_exposition(text: str, source: str) -> Iterator[RawSample]:
    """Every sample in `text`; malformed input becomes one BadInputError line naming `source`."""
    if len(text) > MAX_TEXT_BYTES:
        raise BadInputError(f"{source}: metrics text is {len(text) // 1_048_576} MiB; refusing more than 64 MiB")
    stripped = text.lstrip()
    if stripped.startswith(("<", "{", "[")):
        raise BadInputError(f"{source}: not Prometheus text format (starts with {_short(stripped, 20)!r}); "
                            "expected the body of a vLLM /metrics endpoint")
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                ts = sample.timestamp
                yield RawSample(sample.name, sample.labels, float(sample.value),
                                float(ts) if ts is not None else None)
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
        # OverflowError: an integer value or timestamp too large for a float (hundreds of digits).
        raise BadInputError(f"{source}: not valid Prometheus text format: {_short(str(exc))}") from None


def finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))
