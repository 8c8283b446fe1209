"""Schema of a knowledge-base entry.

One entry is one citable unit of knowledge: a lever, a triage rule, a pitfall, a metric, a flag...
Triage rules carry machine-readable `signals` so the diagnose engine can evaluate them on /metrics; pitfalls
that a serving configuration shows carry signals too, evaluated by the config lint. Every other entry is read
by people and assistants, and cited by the tools' recommendations.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

EntryKind = Literal[
    "lever",  # a knob (flag, env, config) and its rule of thumb by goal
    "triage",  # a diagnosis rule: signals with thresholds -> cause and actions
    "pitfall",  # a common operator mistake
    "metric",  # one /metrics series: type, labels, buckets, meaning, renames
    "flag",  # one `vllm serve` flag: default per version, removals, renames
    "env",  # one environment variable vLLM reads
    "default",  # a default value that changed across versions
    "rule",  # a validity or choice rule used by a planner (parallelism, MoE files)
    "recipe",  # a known-good deployment layout for a model on some hardware
    "hardware-note",  # a fact about a GPU or interconnect that matters for tuning
    "method",  # benchmarking methodology and metric definitions
    "change",  # a version boundary: what changed under the operator, regressions
]

Evidence = Literal["verified-in-source", "vendor-doc", "attributed-claim"]
"""How far a claim was checked: read in vLLM's source at a file and line; stated by a vendor's
own documentation; or stated by a third party and not re-verified (tools must say so)."""

SourceKind = Literal["pr", "issue", "file", "doc", "release", "blog", "paper", "capture", "recipe", "skill"]

ID_PATTERN = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*(?:\.[a-z0-9]+(?:[-_][a-z0-9]+)*)+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    """Where a claim comes from."""

    kind: SourceKind
    ref: str = Field(min_length=3, description="PR/issue number, repo:path:line@version, doc path, ...")
    url: str | None = None
    date: dt.date | None = None
    note: str | None = None


class VllmRange(_Strict):
    """vLLM versions an entry holds for, as a PEP 440 specifier set (e.g. '>=0.11,<0.30')."""

    spec: str = Field(default="", description="empty = every version")

    @field_validator("spec")
    @classmethod
    def _parses(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier as exc:
            raise ValueError(f"bad vLLM version range {value!r}: {exc}") from exc
        return value

    def contains(self, version: str) -> bool:
        """True when `version` (e.g. '0.32.0' or '0.32.0+cpu') falls in the range."""
        try:
            parsed = Version(version)
        except InvalidVersion:
            return True  # an unparseable version string cannot exclude an entry
        return SpecifierSet(self.spec).contains(Version(parsed.public), prereleases=True)


class AppliesTo(_Strict):
    vllm: VllmRange = VllmRange()
    hardware: list[str] = Field(default_factory=list, description="empty = any hardware")
    model_traits: list[str] = Field(default_factory=list, description="e.g. moe, mla, fp8-block")


Op = Literal[">", ">=", "<", "<=", "==", "!="]


class Signal(_Strict):
    """A condition on a derived quantity that the diagnose engine computes from metrics or logs."""

    signal: str = Field(description="name of a derived quantity, see tools/diagnose/signals.py")
    op: Op
    threshold: float
    unit: str | None = None
    why: str = Field(description="what the condition means, in one sentence")


ActionKind = Literal["flag", "env", "config", "operational"]
Direction = Literal["raise", "lower", "set", "enable", "disable", "unset", "check", "upgrade", "add"]


class Action(_Strict):
    """A concrete change an operator can make."""

    kind: ActionKind
    target: str = Field(description="the flag (--x), env var, config key, or operation")
    direction: Direction
    value: str | None = None
    expected_effect: str
    risk: str = "low"


class MetricFacts(_Strict):
    name: str
    type: Literal["counter", "gauge", "histogram", "info"]
    labels: list[str] = Field(default_factory=list)
    buckets: list[float] | None = None
    unit: str | None = None
    renamed_from: list[str] = Field(default_factory=list)
    replaced_by: str | None = None


class FlagFacts(_Strict):
    name: str = Field(description="the flag as typed, e.g. --max-num-seqs")
    defaults: dict[str, str] = Field(default_factory=dict, description="vLLM version range -> default")
    removed_in: str | None = None
    renamed_to: str | None = None
    exists_in_test_vllm: bool = Field(
        default=True, description="False for flags that are recommended only for newer vLLM than the test suite's"
    )


class EnvFacts(_Strict):
    name: str
    default: str | None = None
    removed_in: str | None = None


class Verified(_Strict):
    date: dt.date
    vllm: str = Field(description="the vLLM version the entry was last checked against")

    @field_validator("vllm")
    @classmethod
    def _is_version(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion as exc:
            raise ValueError(f"last_verified.vllm {value!r} is not a version") from exc
        return value


Severity = Literal["info", "warning", "critical"]
Confidence = Literal["low", "medium", "high"]


class Entry(_Strict):
    """One knowledge-base entry."""

    id: Annotated[str, Field(description="stable dotted id, e.g. triage.ttft-high-queue-empty")]
    kind: EntryKind
    title: str = Field(min_length=5)
    statement: str = Field(min_length=20, description="the claim, in our own words")
    details: str | None = Field(default=None, description="optional longer explanation (markdown)")
    applies_to: AppliesTo = AppliesTo()
    signals: list[Signal] = Field(default_factory=list)
    match: Literal["all", "any"] = "all"
    severity: Severity | None = None
    confidence: Confidence | None = None
    actions: list[Action] = Field(default_factory=list)
    evidence: Evidence
    sources: list[Source] = Field(min_length=1)
    last_verified: Verified
    related: list[str] = Field(default_factory=list, description="ids of related entries")
    tags: list[str] = Field(default_factory=list)
    metric: MetricFacts | None = None
    flag: FlagFacts | None = None
    env: EnvFacts | None = None
    supersedes: str | None = Field(default=None, description="a stale claim this entry corrects, and when it changed")

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not ID_PATTERN.match(value):
            raise ValueError(f"id {value!r} must be lowercase dotted words, e.g. 'lever.max-num-seqs'")
        return value

    @model_validator(mode="after")
    def _kind_specific(self) -> Entry:
        if self.kind == "triage":
            if not self.signals:
                raise ValueError("a triage entry needs at least one signal")
            if self.severity is None or self.confidence is None:
                raise ValueError("a triage entry needs severity and confidence")
            if not self.actions:
                raise ValueError("a triage entry needs at least one action")
        if self.signals and self.kind != "triage" and (self.severity is None or self.confidence is None
                                                        or not self.actions):
            raise ValueError("an entry with signals needs severity, confidence and at least one action")
        if self.kind == "metric" and self.metric is None:
            raise ValueError("a metric entry needs a `metric` block")
        if self.kind == "flag" and self.flag is None:
            raise ValueError("a flag entry needs a `flag` block")
        if self.kind == "env" and self.env is None:
            raise ValueError("an env entry needs an `env` block")
        return self

    def summary(self) -> dict[str, Any]:
        """The compact form used by listings."""
        return {
            "id": self.id,
            "kind": self.kind,
            "title": self.title,
            "evidence": self.evidence,
            "applies_to": self.applies_to.model_dump(mode="json"),
            "sources": [s.model_dump(mode="json", exclude_none=True) for s in self.sources],
        }
