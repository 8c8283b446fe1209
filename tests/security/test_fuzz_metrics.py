"""Metrics text fuzzed from real vLLM scrapes: a diagnosis or one BadInputError, never another exception."""

from __future__ import annotations

import contextlib
from pathlib import Path

from fuzzing import FUZZ, FUZZ_SLOW, mutated_lines
from hypothesis import given
from hypothesis import strategies as st

from vllm_tune.tools.diagnose.api import diagnose_texts
from vllm_tune.tools.diagnose.snapshot import parse_snapshot
from vllm_tune.tools.errors import BadInputError

CAPTURES = Path(__file__).parents[1] / "data" / "captures"
TEXTS = [p.read_text() for p in sorted(CAPTURES.glob("*.prom"))]


@FUZZ
@given(mutated_lines(TEXTS))
def test_parse_snapshot(text: str) -> None:
    try:
        parse_snapshot(text, "fuzz")
    except BadInputError as exc:
        assert "\n" not in str(exc)


@FUZZ_SLOW
@given(mutated_lines(TEXTS), mutated_lines(TEXTS), st.sampled_from([None, 1.0, 10.0]))
def test_diagnose_two_texts(before: str, after: str, window: float | None) -> None:
    try:
        diagnose_texts([("before", before), ("after", after)], window_s=window)
    except BadInputError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(st.text(max_size=300))
def test_parse_snapshot_arbitrary_text(text: str) -> None:
    with contextlib.suppress(BadInputError):
        parse_snapshot(text, "fuzz")
