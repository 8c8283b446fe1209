"""The text block of a tool result: a readable summary within a fixed budget.

Clients that show only text (and the assistant reading it) get what the CLI prints, most important
first; the full result stays in the structured content. A tool without its own renderer gets a
generic one: its scalar fields, then the sizes of its lists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

SUMMARY_BUDGET = 3000
_CUT = "\n... (cut; the full result is in the structured content)"

M = TypeVar("M", bound=BaseModel)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def generic_summary(model: BaseModel) -> str:
    """Scalars first (skipping empty ones), then one line per list or nested object with its size."""
    data = model.model_dump(mode="json")
    lines: list[str] = []
    nested: list[str] = []
    for key, value in data.items():
        if value in (None, "", [], {}):
            continue
        if _scalar(value):
            lines.append(f"{key}: {value}")
        elif isinstance(value, list) and all(_scalar(v) for v in value) and len(str(value)) <= 300:
            lines.append(f"{key}: {', '.join(str(v) for v in value)}")
        elif isinstance(value, list):
            nested.append(f"{key}: {len(value)} item(s)")
        else:
            nested.append(f"{key}: {{{', '.join(list(value)[:8])}{', ...' if len(value) > 8 else ''}}}")
    return "\n".join(lines + nested)


def fit(text: str, budget: int = SUMMARY_BUDGET) -> str:
    """`text` cut at a line boundary so that it and the cut notice stay within `budget`."""
    if len(text) <= budget:
        return text
    room = budget - len(_CUT)
    head = text[:room]
    newline = head.rfind("\n")
    if newline > room // 2:
        head = head[:newline]
    return head + _CUT


def summary_text(model: M, summarize: Callable[[M], str] | None = None) -> str:
    text = summarize(model) if summarize is not None else generic_summary(model)
    return fit(text.strip() or generic_summary(model))
