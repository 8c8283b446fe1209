"""Register a domain function that takes one pydantic input model as an MCP tool.

The MCP SDK derives a tool's input schema from the function signature. Our domain functions take
one pydantic model (shared with the CLI and the JSON output), so this module builds a wrapper
whose signature lists that model's fields as keyword parameters: MCP callers see flat arguments
with the model's descriptions and constraints, and the body receives the validated model.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import BaseModel, ValidationError

from vllm_tune.server.summary import summary_text
from vllm_tune.tools.errors import VllmTuneError

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)


def tool_error(exc: Exception) -> ToolError:
    """One clear line for the caller; the MCP layer marks the result as an error."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        return ToolError(f"bad input: {where}: {first['msg']}")
    return ToolError(str(exc))


def add_model_tool(
    mcp: MCPServer[Any],
    *,
    name: str,
    title: str,
    description: str,
    input_model: type[In],
    output_model: type[Out],
    run: Callable[[In, Context], Awaitable[Out | CallToolResult]],
    annotations: ToolAnnotations,
    summarize: Callable[[Out], str] | None = None,
) -> None:
    """Expose `run(input, ctx)` as the MCP tool `name` with flattened, validated arguments.

    The result is the output model as structured content plus a readable text summary (what the CLI
    prints, most important first, cut to a budget) instead of the JSON repeated as text. `run` may return
    a CallToolResult to add content blocks (images); its structured content is still checked against
    `output_model`."""

    async def wrapper(ctx: Context, **kwargs: Any) -> Any:
        try:
            request = input_model.model_validate(kwargs)
            result = await run(request, ctx)
        except (VllmTuneError, ValidationError) as exc:
            raise tool_error(exc) from exc
        return with_summary(result, output_model, summarize)

    params = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    hints: dict[str, Any] = {"ctx": Context, "return": output_model}
    for field_name, field in input_model.model_fields.items():
        default = inspect.Parameter.empty if field.is_required() else field.get_default(call_default_factory=True)
        meta = field
        if field.default_factory is not None:
            # The signature carries the default itself; a FieldInfo may not hold both kinds of default.
            meta = copy.copy(field)
            meta.default_factory = None
            meta.default = default
        annotation = Annotated[field.annotation, meta]  # type: ignore[name-defined]
        params.append(inspect.Parameter(field_name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                        default=default))
        hints[field_name] = annotation
    wrapper.__signature__ = inspect.Signature(params, return_annotation=output_model)  # type: ignore[attr-defined]
    wrapper.__annotations__ = hints
    wrapper.__name__ = name
    wrapper.__doc__ = description
    mcp.add_tool(wrapper, name=name, title=title, description=description, annotations=annotations,
                 structured_output=True)


def with_summary(result: BaseModel | CallToolResult, output_model: type[Out],
                 summarize: Callable[[Out], str] | None) -> CallToolResult:
    """The structured result with a short text block first; extra blocks (images) kept after it."""
    extra: list[ContentBlock] = []
    if isinstance(result, CallToolResult):
        extra = [block for block in result.content if not isinstance(block, TextContent)]
        model = output_model.model_validate(result.structured_content)
    else:
        model = output_model.model_validate(result.model_dump(mode="json")) if not isinstance(
            result, output_model) else result
    text = summary_text(model, summarize)
    return CallToolResult(content=[TextContent(type="text", text=text), *extra],
                          structured_content=model.model_dump(mode="json"))
