"""Helpers every sub-command shares: error handling, exit codes and output."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from pydantic import BaseModel

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_TARGET = 3
EXIT_INTERRUPTED = 130

Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A failure found by the CLI layer itself (a flag's value), with the exit code it maps to."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.exit_code = code


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    raise CliError(message, code)


def report_error(message: str, code: int, *, as_json: bool, prefix: str = "error") -> int:
    """One line on stderr; with --json the same as a JSON object on stdout, where the JSON reader looks."""
    if as_json:
        print(json.dumps({"error": message, "exit_code": code}))
    else:
        print(f"vllm-tune: {prefix}: {message}", file=sys.stderr)
    return code


def run_handler(handler: Handler, args: argparse.Namespace) -> int:
    """Run a sub-command: expected failures become one line on stderr and their exit code."""
    from pydantic import ValidationError

    from vllm_tune.tools.errors import VllmTuneError

    as_json = bool(getattr(args, "json", False))
    try:
        return handler(args)
    except (VllmTuneError, CliError) as exc:
        return report_error(str(exc), exc.exit_code, as_json=as_json)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        return report_error(f"bad input: {where}: {first['msg']}", EXIT_BAD_INPUT, as_json=as_json)
    except KeyboardInterrupt:
        if not as_json:
            print("vllm-tune: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        return report_error("interrupted", EXIT_INTERRUPTED, as_json=True)
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # the last line of defence: never a traceback unless asked for
        if os.environ.get("VLLM_TUNE_DEBUG"):
            raise
        return report_error(f"{type(exc).__name__}: {exc} (set VLLM_TUNE_DEBUG=1 for a traceback)", EXIT_FAILURE,
                            as_json=as_json, prefix="unexpected failure")


def print_json(model: BaseModel) -> None:
    print(model.model_dump_json(indent=2, exclude_none=False))


def parse_key_values(text: str, *, allowed: set[str] | None = None, what: str = "value") -> dict[str, float]:
    """Parse 'ttft=500,tpot=50' into {'ttft': 500.0, 'tpot': 50.0}."""
    from vllm_tune.tools.errors import BadInputError

    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        key = key.strip().lower()
        if not sep:
            raise BadInputError(f"bad {what} {part!r}: expected KEY=NUMBER")
        if allowed is not None and key not in allowed:
            raise BadInputError(f"unknown {what} key {key!r}; expected one of {', '.join(sorted(allowed))}")
        try:
            out[key] = float(raw)
        except ValueError:
            raise BadInputError(f"bad {what} {part!r}: {raw!r} is not a number") from None
    return out


GOODPUT_HELP = "the same SLO in vllm bench serve's form, e.g. ttft:500 tpot:50 (ttft, tpot, e2el)"


def slo_from_args(args: argparse.Namespace) -> dict[str, float]:
    """--slo ttft=500,tpot=50 and vLLM's --goodput ttft:500 tpot:50, read by the one SLO vocabulary that
    run_benchmark, what_if and tune share (tools/slo.py); both flags together are one SLO."""
    from vllm_tune.tools.slo import goodput_slo

    items = [*([args.slo] if getattr(args, "slo", None) else []), *(getattr(args, "goodput", None) or [])]
    return goodput_slo(items) if items else {}


def parse_env_items(items: list[str]) -> dict[str, str]:
    """Repeated --env NAME=VALUE options as a dict."""
    from vllm_tune.tools.errors import BadInputError

    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise BadInputError(f"--env {item!r}: expected NAME=VALUE")
        out[name] = value
    return out
