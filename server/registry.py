"""Register a domain function that takes one pydantic input model as an MCP tool.

The MCP SDK derives a tool's input schema from the function signature. Our domain functions take
one pydantic model (shared with the CLI and the JSON output), so this module builds a wrapper
whose signature lists that model's fields as keyword parameters: MCP callers see flat arguments
with the model's descriptions and constraints, and the body receives the validated model.
"""

from __future__ import annotations

import copy
import inspect
import logging
import warnings
from collections.abc import Awaitable, Callable, Collection
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import CallToolResult, ClientCapabilities, ContentBlock, RootsCapability, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from vllm_tune.server.summary import summary_text
from vllm_tune.tools.errors import VllmTuneError
from vllm_tune.tools.files import FileRoots, confined, roots_from_env, roots_from_uris

log = logging.getLogger(__name__)
_ROOTS_TIMEOUT_S = 5.0

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)

# Tool name -> the settings it takes through `options` instead of as published parameters. An assistant pays for
# every published parameter before its first call; the settings most calls leave at their defaults are named
# once in `options`' description, and their types and meanings are one resource read away (tool_schema_uri).
ADVANCED: dict[str, tuple[str, ...]] = {}
OPTIONS = "options"


def tool_schema_uri(tool: str) -> str:
    return f"vllm-tune://tools/{tool}"


def _merge_options(tool: str, fields: Collection[str], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments with `options` spread in; an option that is not a setting of the tool is refused."""
    options = kwargs.pop(OPTIONS, None) or {}
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise ToolError(f"bad input: options.{unknown[0]}: not a setting of {tool}; "
                        f"see {tool_schema_uri(tool)}")
    return {**kwargs, **options}


def tool_error(exc: Exception) -> ToolError:
    """One clear line for the caller; the MCP layer marks the result as an error."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        return ToolError(f"bad input: {where}: {first['msg']}")
    return ToolError(str(exc))


def unexpected_error(exc: BaseException) -> ToolError:
    """A failure we did not foresee still gets a reason the caller can act on (the SDK would send only
    'Error executing tool X'). Only the kind of failure and, for a file system error, its reason and path: an
    arbitrary exception's text may quote the input it choked on (a line of a file, say)."""
    if isinstance(exc, MemoryError):
        return ToolError("out of memory: the input, or what it led to, is too large")
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return ToolError(f"{exc.strerror}{where}")
    return ToolError(f"internal error ({type(exc).__name__}); the server log has the details")


async def file_roots(ctx: Context) -> FileRoots:
    """The folders this call may read under: the client's MCP roots when it offers them, else the operator's."""
    try:
        session = ctx.session
        if session.check_client_capability(ClientCapabilities(roots=RootsCapability())):
            with warnings.catch_warnings(), anyio.fail_after(_ROOTS_TIMEOUT_S):
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                listed = await session.list_roots()
            found = roots_from_uris([str(r.uri) for r in listed.roots])
            if found is not None:
                return found
    except Exception as exc:  # a client that declares roots but cannot list them falls back to the env policy
        log.info("MCP roots unavailable: %s", exc)
    return roots_from_env()


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
    advanced: Collection[str] = (),
) -> None:
    """Expose `run(input, ctx)` as the MCP tool `name` with flattened, validated arguments.

    The result is the output model as structured content plus a readable text summary (what the CLI
    prints, most important first, cut to a budget) instead of the JSON repeated as text. `run` may return
    a CallToolResult to add content blocks (images); its structured content is still checked against
    `output_model`.

    `advanced` fields stay accepted as arguments but are published only by name, inside `options`."""
    missing = set(advanced) - set(input_model.model_fields)
    if missing:
        raise ValueError(f"{name}: advanced fields {sorted(missing)} are not fields of {input_model.__name__}")
    if advanced:
        ADVANCED[name] = tuple(advanced)

    async def wrapper(ctx: Context, **kwargs: Any) -> Any:
        try:
            if advanced:
                kwargs = _merge_options(name, input_model.model_fields, kwargs)
            request = input_model.model_validate(kwargs)
            with confined(await file_roots(ctx)):
                result = await run(request, ctx)
        except (VllmTuneError, ValidationError) as exc:
            raise tool_error(exc) from exc
        except (ToolError, MCPError):
            raise
        except Exception as exc:
            log.exception("tool %s failed unexpectedly", name)
            raise unexpected_error(exc) from exc
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
    if advanced:
        described = Field(description=f"other settings by name ({tool_schema_uri(name)} has their types): "
                                      + ", ".join(advanced))
        options = Annotated[dict[str, Any] | None, described]
        params.append(inspect.Parameter(OPTIONS, inspect.Parameter.KEYWORD_ONLY, annotation=options, default=None))
        hints[OPTIONS] = options
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
