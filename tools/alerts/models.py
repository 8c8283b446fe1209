"""Input and output of `alerts` (shared by the CLI flags and --json)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from vllm_tune.tools.diagnose.models import ServeFlags
from vllm_tune.tools.slo import DEFAULT_DIAGNOSE_PERCENTILE, SloTargets

# Prometheus durations: one or more <number><unit> parts, largest unit first (model.ParseDuration).
DURATION = re.compile(r"^(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?$")
LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
Format = Literal["prometheus-rules", "grafana"]


def _duration(value: str, *, zero_ok: bool) -> str:
    text = value.strip()
    if not text or not DURATION.match(text) or not any(c.isdigit() for c in text):
        raise ValueError(f"{value!r} is not a Prometheus duration such as 30s, 5m or 1h")
    if not zero_ok and not any(c in "123456789" for c in text):
        raise ValueError(f"{value!r} must be longer than zero")
    return text


class AlertsInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Format = Field(default="prometheus-rules", description="Prometheus rule file (YAML) or Grafana "
                           "dashboard (JSON)")
    selector: str | None = Field(default=None, max_length=2000, description='PromQL label matchers added to '
                                 'every series, e.g. job="vllm",namespace="prod"')
    vllm_version: str | None = Field(default=None, max_length=50, description="metric names and rules of this "
                                     "vLLM release (default: the newest release the knowledge base was checked "
                                     "against)")
    group_by: list[str] = Field(default=["job", "instance", "model_name"], min_length=1, max_length=10,
                                description="labels each alert is raised per (engines are summed)")
    range: str = Field(default="5m", description="rate() / *_over_time window")
    for_duration: str | None = Field(default=None, description="`for:` of every rule (default: the knowledge "
                                     "entry's where it gives one, else 5m); 0s fires at the first evaluation")
    slo: SloTargets = Field(default=SloTargets(), description="latency targets (ms) of the triage rules "
                            "(default: the starter interactive targets diagnose uses)")
    slo_percentile: float = Field(default=DEFAULT_DIAGNOSE_PERCENTILE, gt=0, lt=100, description="the "
                                  "percentile the targets are judged at, as in diagnose")
    serve_flags: ServeFlags = Field(default=ServeFlags(), description="flags some rules compare with "
                                    "(max_num_seqs ...); rules that need a missing one are skipped")

    @field_validator("range")
    @classmethod
    def _range(cls, value: str) -> str:
        return _duration(value, zero_ok=False)

    @field_validator("for_duration")
    @classmethod
    def _for(cls, value: str | None) -> str | None:
        return None if value is None else _duration(value, zero_ok=True)

    @field_validator("group_by")
    @classmethod
    def _labels(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if not LABEL_NAME.match(v) or v == "le"]
        if bad:
            raise ValueError(f"not usable as alert labels: {', '.join(bad)}")
        return list(dict.fromkeys(value))


class AlertRule(BaseModel):
    alert: str
    expr: str
    for_duration: str
    severity: Literal["info", "warning", "critical"]
    knowledge_id: str = Field(description="the knowledge entry the rule comes from")
    origin: Literal["triage", "starter-threshold"]
    summary: str
    description: str
    runbook: str


class SkippedRule(BaseModel):
    knowledge_id: str
    name: str
    reason: str


class AlertsOutput(BaseModel):
    format: Format
    vllm_version: str
    text: str = Field(description="the rule file or dashboard, ready to write")
    rules: list[AlertRule] = Field(default_factory=list)
    skipped: list[SkippedRule] = Field(default_factory=list)
    panels: int = 0
    notes: list[str] = Field(default_factory=list)
