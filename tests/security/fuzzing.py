"""Shared pieces of the fuzz tests: a bounded example count, and line mutations of real inputs."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Bounded so the suite stays fast on a shared 2-core CI machine; no deadline since that machine is noisy.
FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ_SLOW = settings(FUZZ, max_examples=60)

# Texts that have broken parsers before: non-numbers, huge and special floats, odd Unicode, control bytes.
NASTY = st.sampled_from(["abc", "", " ", "nan", "NaN", "inf", "-inf", "+Inf", "1e999", "-0", "0", "-1", "0x10",
                         "1_0", "١٢", "\x00", "\ufeff", "{", "}", "[", '"', "\\", "=", ",", "\n", "\t", "é", "𝟘",
                         "9" * 400, "-" * 3, "None", "null", "true"])


_QUOTED = re.compile(r'"[^"]*"')


def mutate(line: str, cut: int, nasty: str, how: int) -> str:
    """One change to a real line: cut short, a quoted value or the last word replaced, or a word inserted."""
    if how == 1:
        return line[: cut % (len(line) + 1)]
    if how == 2:
        quoted = list(_QUOTED.finditer(line))
        if quoted:
            m = quoted[cut % len(quoted)]
            return f'{line[:m.start()]}"{nasty}"{line[m.end():]}'
    if how == 3:
        head, _, _ = line.rpartition(" ")
        return f"{head} {nasty}" if head else nasty
    if how == 4:
        words = line.split(" ")
        words.insert(cut % (len(words) + 1), nasty)
        return " ".join(words)
    return line


def mutated_lines(texts: list[str]) -> st.SearchStrategy[str]:
    """One of the real texts with one to four of its lines changed (see mutate): mostly valid, so that each
    example reaches past the first syntax check into the code that reads values."""
    @st.composite
    def build(draw: st.DrawFn) -> str:
        lines = draw(st.sampled_from(texts)).splitlines()
        for _ in range(draw(st.integers(1, 4))):
            if not lines:
                break
            at = draw(st.integers(0, len(lines) - 1))
            lines[at] = mutate(lines[at], draw(st.integers(0, 500)), draw(NASTY | st.text(max_size=8)),
                               draw(st.integers(1, 4)))
        return "\n".join(lines) + "\n"

    return build()
