"""Entry point of `vllm-tune`. Keeps imports light: sub-commands import their tools lazily."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from vllm_tune.cli.common import EXIT_BAD_INPUT, report_error, run_handler

# Each module exposes `register(subparsers)` and sets `handler` on its parser.
_COMMANDS = ("demo", "mcp", "kb", "diagnose", "capture", "plan", "calibrate", "moe", "bench", "lint", "compare",
             "tune", "whatif", "alerts")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        if "--json" in sys.argv[1:]:
            report_error(f"{self.prog}: {message}", EXIT_BAD_INPUT, as_json=True)
        else:
            self.print_usage(sys.stderr)
            print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="vllm-tune",
        description="Diagnose and tune live vLLM deployments (MCP server, CLI, cited knowledge base).",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"vllm_tune.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"vllm_tune.cli.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from vllm_tune.tools import surface

    surface.use("cli")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from importlib.metadata import version

        print(f"vllm-tune {version('vllm-tune')}")
        return 0
    if not args.command:
        parser.print_help()
        return EXIT_BAD_INPUT
    return run_handler(args.handler, args)


if __name__ == "__main__":
    raise SystemExit(main())
