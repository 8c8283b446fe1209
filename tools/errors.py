"""Error types shared by every tool; each maps onto one CLI exit code and one clear line."""

from __future__ import annotations


class VllmTuneError(Exception):
    """Base class: an expected failure that deserves one clear line, never a traceback."""

    exit_code = 1


class BadInputError(VllmTuneError):
    """The caller's input is malformed, absurd or inconsistent (CLI exit 2)."""

    exit_code = 2


class TargetError(VllmTuneError):
    """A target is unreachable, or answers but is not a vLLM server (CLI exit 3)."""

    exit_code = 3


class TargetNotAllowedError(BadInputError):
    """The operator has not allowed this network target (CLI exit 2)."""


class KnowledgeError(VllmTuneError):
    """The knowledge base failed to load or validate (a packaging defect, CLI exit 1)."""
