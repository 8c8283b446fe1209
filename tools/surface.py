"""Which surface is talking to the operator, so a message names what they can type.

A CLI user types `vllm-tune tune run S --yes`; an assistant calls `tune_run_trial` with `confirm=true`.
Domain functions are shared by both, so the few messages that tell the caller what to do next pick their
wording here. Each entry point sets the surface once for its process (the CLI's main, the MCP server's
build); the default is MCP, the surface that is not a person at a terminal.
"""

from __future__ import annotations

from typing import Literal

Surface = Literal["mcp", "cli"]
_current: list[Surface] = ["mcp"]


def use(surface: Surface) -> None:
    _current[0] = surface


def current() -> Surface:
    return _current[0]


def say(*, mcp: str, cli: str) -> str:
    """The wording for the surface in use."""
    return cli if _current[0] == "cli" else mcp
