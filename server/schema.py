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
        if key == "$defs" and isinstance(value, dict):
            # the property that refers to a definition describes it; the definition's own text repeats that
            value = {name: {k: v for k, v in d.items() if k != "description"} if isinstance(d, dict) else d
                     for name, d in value.items()}
        out[key] = compact_schema(value, _names=not _names and key in ("properties", "$defs"))
    if not _names:
        _merge_nullable(out)
        _drop_guards(out)
        _optional_not_null(out)
    return out


def _refs(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(_refs(item) for item in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {node["$ref"].rsplit("/", 1)[-1]} if isinstance(node.get("$ref"), str) else set()
    return found.union(*(_refs(v) for v in node.values())) if node else found


def without_properties(schema: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """`schema` minus the named top-level properties and the definitions only they used."""
    out = dict(schema)
    out["properties"] = {k: v for k, v in (schema.get("properties") or {}).items() if k not in names}
    if "required" in schema:
        out["required"] = [r for r in schema["required"] if r not in names]
    defs = schema.get("$defs")
    if isinstance(defs, dict):
        used = _refs(out["properties"])
        while True:  # a definition may refer to another one
            more = _refs([defs[d] for d in used if d in defs]) - used
            if not more:
                break
            used |= more
        kept = {k: v for k, v in defs.items() if k in used}
        out.pop("$defs")
        if kept:
            out["$defs"] = kept
    return out
