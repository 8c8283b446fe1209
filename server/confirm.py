"""Asking the user before an acting tool starts, through MCP elicitation.

Clients without elicitation (or sessions without a back-channel, such as the stateless mode) cannot be
asked; the tools then fall back to their explicit `confirm` argument, which the model must only set after
the user agreed."""

from __future__ import annotations

import logging

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

log = logging.getLogger(__name__)


class Confirmation(BaseModel):
    confirm: bool = Field(description="go ahead now")


async def user_confirms(ctx: Context, message: str) -> bool:
    """True only when the user accepted and ticked confirm; False when declined or the client cannot ask."""
    try:
        answer = await ctx.elicit(message, Confirmation)
    except Exception as exc:  # no elicitation here: the caller falls back to the explicit flag
        log.info("elicitation unavailable: %s", exc)
        return False
    data = getattr(answer, "data", None)
    return getattr(answer, "action", "") == "accept" and bool(getattr(data, "confirm", False))
