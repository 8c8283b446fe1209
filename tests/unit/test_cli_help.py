"""Every option and argument of every `vllm-tune` sub-command says what it is for in --help."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from vllm_tune.cli.main import build_parser


def _undocumented(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _undocumented(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}"


def test_every_flag_has_help() -> None:
    parser = build_parser()
    assert sum(1 for _ in parser._actions) > 1
    assert list(_undocumented(parser, "vllm-tune")) == []
