"""Make the JSON schemas we publish over MCP cheap to read.

An assistant pays for every character of `tools/list` before its first call. pydantic's schemas repeat a
`title` for every property (the property name again), spell an optional field as `anyOf [X, null]` and
carry `default: null`; none of that tells a caller anything the property name and type do not.
"""

from __future__ import annotations

from typing import Any

_NULL = {"type": "null"}


def _merge_nullable(node: dict[str, Any]) -> None:
    """`anyOf: [{type: X, ...}, {type: null}]` -> `type: [X, null]` with X's other keywords kept."""
    alts = node.get("anyOf")
    if not isinstance(alts, list) or _NULL not in alts:
        return
    others = [a for a in alts if a != _NULL]
    if all(set(a) == {"type"} and isinstance(a["type"], str) for a in others):
        node.pop("anyOf")
        node["type"] = [*(a["type"] for a in others), "null"]
    elif len(others) == 1 and "$ref" not in others[0] and "type" in others[0] and isinstance(others[0]["type"], str):
        node.pop("anyOf")
        other = dict(others[0])
        node["type"] = [other.pop("type"), "null"]
        for key, value in other.items():
            node.setdefault(key, value)


_NOTHING = object()


def _informative_default(value: Any) -> Any:
    """A default minus its null members; nothing when what is left says no more than "optional"."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if v is not None}
    if value is None or value == {} or value == []:
        return _NOTHING
    return value


# Upper bounds this large are guards against absurd input, checked by the server anyway; they tell a caller
# nothing about a sensible value, so they are not published.
_GUARD_BOUND = 100_000


def _drop_guards(node: dict[str, Any]) -> None:
    for key in ("maximum", "exclusiveMaximum"):
        value = node.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= _GUARD_BOUND:
            node.pop(key)


def _optional_not_null(node: dict[str, Any]) -> None:
    """An optional property is omitted for "none"; `type: [X, null]` then only costs characters."""
    props, required = node.get("properties"), set(node.get("required") or ())
    if not isinstance(props, dict):
        return
    for name, prop in props.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if name not in required and isinstance(kind, list) and len(kind) == 2 and "null" in kind:
            prop["type"] = next(k for k in kind if k != "null")


def compact_schema(schema: Any, *, _names: bool = False) -> Any:
    """A copy of `schema` without titles and null defaults, with nullable unions folded.

    `_names` marks a mapping whose keys are property or definition names (a property may be called
    `title` or `default`), so those keys are kept."""
    if isinstance(schema, list):
        return [compact_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if not _names and key == "title":
            continue
        if not _names and key == "default":
            value = _informative_default(value)
            if value is _NOTHING:
                continue
        out[key] = compact_schema(value, _names=not _names and key in ("properties", "$defs"))
    if not _names:
        _merge_nullable(out)
        _drop_guards(out)
        _optional_not_null(out)
    return out
