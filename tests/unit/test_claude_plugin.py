"""The Claude Code plugin manifest: valid against the published manifest schema's rules for the fields it
uses, names the skill that sits beside it, and starts the MCP server this package installs."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / ".claude-plugin" / "plugin.json"

# The rules of https://json.schemastore.org/claude-code-plugin-manifest.json (SchemaStore/schemastore
# src/schemas/json/claude-code-plugin-manifest.json @3c0a000, generated 2026-04-23) for the fields this
# manifest uses, restated; fields it does not use are left open, as the published schema leaves them.
_STDIO = {"type": "object", "required": ["command"],
          "properties": {"type": {"const": "stdio"}, "command": {"type": "string", "minLength": 1},
                         "args": {"type": "array", "items": {"type": "string"}},
                         "env": {"type": "object", "additionalProperties": {"type": "string"}}}}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "$schema": {"type": "string"},
        "name": {"type": "string", "minLength": 1, "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$"},
        "version": {"type": "string"},
        "description": {"type": "string"},
        "license": {"type": "string"},
        "keywords": {"type": "array", "items": {"type": "string"}},
        "mcpServers": {"type": "object", "additionalProperties": _STDIO},
    },
}


def _manifest() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MANIFEST.read_text(encoding="utf-8"))
    return data


def test_manifest_is_valid() -> None:
    jsonschema.validate(_manifest(), SCHEMA)


def test_manifest_matches_the_package_and_the_skill() -> None:
    data = _manifest()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert data["version"] == project["version"] and data["license"] == project["license"]
    assert "vllm-tune" in project["scripts"]
    # No skills/ folder and no `skills` field: Claude Code loads the SKILL.md at the plugin root.
    assert "skills" not in data and not (ROOT / "skills").exists()
    skill = (ROOT / "SKILL.md").read_text(encoding="utf-8")
    assert skill.startswith("---\nname: vllm-tune\n")
    server = data["mcpServers"]["vllm-tune"]
    assert server["args"][-2:] == ["vllm-tune", "mcp"]  # the console script and sub-command this package ships
    assert "${CLAUDE_PLUGIN_ROOT}" in server["args"]  # installed from the plugin's own copy of this repository


def test_the_schema_refuses_what_claude_code_would() -> None:
    import pytest

    for broken in ({"name": "Vllm Tune"}, {"name": "x", "mcpServers": {"s": {"command": ""}}},
                   {"name": "x", "mcpServers": {"s": {"type": "stdio", "args": ["mcp"]}}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA)
