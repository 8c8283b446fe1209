"""Whether `vllm serve` takes a value for an option: the conversion its parser applies, then the range its config
classes enforce.

The flag tables (knowledge/serve_flags) give each single-value option a `value` entry: the kind of conversion
(what vLLM's argparse `type=` does with the text), whether "None" and "" mean unset, and the bounds of the
config field it lands in (pydantic ge/gt/le/lt). scripts/build_serve_flags.py picks the kind by running vLLM's
own converter and this module's on the same sample texts and keeping the kind that agrees on all of them, so
this file is loaded there by path: it imports nothing from the package.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from typing import Any

# Most specific first: the table builder keeps the first kind that behaves like vLLM's converter.
KINDS = ("human-int-or-auto", "human-int", "int", "float", "json", "json-or-str", "str")

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_JSON_LIKE = re.compile(r"(?s)^\s*{.*}\s*$")


def _human_int(text: str) -> int:
    text = text.strip()
    match = _HUMAN.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        return int(number) * _BINARY[suffix]  # a decimal with a binary suffix is refused, as vLLM does
    return int(text)


def convert(kind: str, nullable: bool, text: str) -> Any:
    """The value vLLM's parser makes of `text`; ValueError (or OverflowError) where it refuses it."""
    if nullable and text in ("", "None"):
        return None
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "human-int":
        return _human_int(text)
    if kind == "human-int-or-auto":
        return -1 if text.strip() == "-1" or text.strip().lower() == "auto" else _human_int(text)
    if kind == "json":
        return json.loads(text)
    if kind == "json-or-str":
        return json.loads(text) if _JSON_LIKE.match(text) else text
    if kind == "str":
        return text
    raise ValueError(f"unknown value kind {kind!r}")


_WHAT = {"int": "an integer", "float": "a number", "human-int": "an integer (1k, 2M, 1K accepted)",
         "human-int-or-auto": "an integer (1k, 2M, 1K or auto accepted)", "json": "JSON",
         "json-or-str": "text or a JSON object", "str": "text"}
_BOUNDS: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    "ge": (">=", operator.ge), "gt": (">", operator.gt), "le": ("<=", operator.le), "lt": ("<", operator.lt)}


def problem(spec: dict[str, Any], text: str) -> str | None:
    """Why vLLM refuses `text` for an option with this table entry, or None when it takes it."""
    kind = str(spec.get("type"))
    try:
        value = convert(kind, bool(spec.get("nullable")), text)
    except (ValueError, OverflowError, RecursionError):
        return f"is not {_WHAT.get(kind, kind)}"
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    for key, bound in (spec.get("range") or {}).items():
        sign, holds = _BOUNDS[key]
        # NaN fails every comparison, as it fails pydantic's bound checks in vLLM's config classes.
        if not holds(value, bound):
            return f"must be {sign} {bound:g}"
    return None
