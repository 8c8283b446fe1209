"""lint_config fuzzed: command lines from the real option table with odd values, and config YAML of any shape;
the answer is a lint result or one BadInputError, never another exception."""

from __future__ import annotations

import shlex

import yaml
from fuzzing import FUZZ, NASTY
from hypothesis import given
from hypothesis import strategies as st

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.lint.api import LintInput, LintOutput, lint_config
from vllm_tune.tools.lint.flags import load_table

TABLE = load_table("0.34.0")
OPTIONS = sorted(TABLE.options)
NUMBERS = st.integers(-10**20, 10**20).map(str) | st.floats(allow_nan=True, allow_infinity=True).map(repr)
VALUES = NASTY | NUMBERS | st.text(max_size=10)
TOKEN = st.sampled_from(OPTIONS) | st.sampled_from(OPTIONS).map(lambda o: o.replace("-", "_")) | VALUES
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10)
YAML_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) |
                           st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
KEYS = st.sampled_from([o.lstrip("-") for o in OPTIONS if o.startswith("--")]) | st.text(max_size=12)


def _lint(**kw: object) -> LintOutput | None:
    try:
        return lint_config(LintInput(offline=True, **kw))  # type: ignore[arg-type]
    except BadInputError as exc:
        assert "\n" not in str(exc)
        return None


@FUZZ
@given(st.lists(TOKEN, max_size=12), st.sampled_from(["deepseek-r1", "org/m", "llama-3.1-70b"]))
def test_command_lines(tokens: list[str], model: str) -> None:
    _lint(command=f"vllm serve {model} " + " ".join(shlex.quote(t) for t in tokens))


@FUZZ
@given(st.dictionaries(KEYS, YAML_VALUES, max_size=6))
def test_config_yaml_mappings(data: dict[str, object]) -> None:
    _lint(command="vllm serve deepseek-r1", config_yaml=yaml.safe_dump(data))


@FUZZ
@given(st.text(max_size=300))
def test_config_yaml_text(text: str) -> None:
    out = _lint(command="vllm serve org/m", config_yaml=text)
    if out is not None:
        # keys that are not option names are counted, never quoted back
        assert all(p.option.startswith(("--", "(", "-", "VLLM_")) or p.option.isidentifier()
                   for p in out.option_problems)
