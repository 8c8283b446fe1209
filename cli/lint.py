"""`vllm-tune lint -- vllm serve MODEL ...`: check a serving configuration against the target vLLM release."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING, Any

from vllm_tune.cli.common import EXIT_FAILURE, EXIT_OK, parse_env_items, print_json

if TYPE_CHECKING:
    pass


def register(sub: Any) -> None:
    p = sub.add_parser(
        "lint", help="check a vllm serve command line, --config YAML and environment before starting it",
        description="Read a vllm serve command (after --, or with --command), a --config YAML and environment "
                    "variables against the option table of the target vLLM release and the knowledge base's "
                    "configuration pitfalls. Exit 0: nothing worth fixing; 1: warnings or critical problems; 2: "
                    "bad input.")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="the command line, after --")
    p.add_argument("--command", dest="command_line", help="the command line as one string (instead of after --)")
    p.add_argument("--config", dest="config_file", help="a vLLM --config YAML file")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable the server starts with (repeatable)")
    p.add_argument("--vllm-version", help="release to check against (default: newest bundled table)")
    p.add_argument("--model", help="model id or local path when the command does not name it")
    p.add_argument("--gpu", help="GPU type, e.g. H200 or GB200, for hardware-specific pitfalls")
    p.add_argument("--device", choices=("cuda", "rocm", "cpu", "tpu", "xpu"),
                   help="target device (default: a GPU; --gpu cpu means cpu)")
    p.add_argument("--nodes", type=int, help="nodes the deployment spans")
    p.add_argument("--offline", action="store_true", help="never read the model's config from the hub")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.set_defaults(handler=_lint)


def _lint(args: argparse.Namespace) -> int:
    from vllm_tune.tools.errors import BadInputError
    from vllm_tune.tools.lint.api import LintInput, lint_config
    from vllm_tune.tools.lint.render import render_lint

    argv = [a for a in args.argv if a != "--"] if args.argv else []
    if argv and args.command_line:
        raise BadInputError("give the command either after -- or with --command, not both")
    command = args.command_line or (shlex.join(argv) if argv else None)
    out = lint_config(LintInput(command=command, config_file=args.config_file, env=parse_env_items(args.env),
                                vllm_version=args.vllm_version, model=args.model, gpu=args.gpu, device=args.device,
                                nodes=args.nodes,
                                offline=args.offline))
    if args.json:
        print_json(out)
    else:
        print(render_lint(out))
    serious = any(p.severity in ("warning", "critical") for p in out.option_problems) or \
        any(f.severity in ("warning", "critical") for f in out.findings)
    return EXIT_FAILURE if serious else EXIT_OK
