"""Prometheus alerting rules and a Grafana dashboard generated from the knowledge base.

The triage entries (knowledge/entries/triage.yaml) are the same rules `diagnose` evaluates on a window of
scrapes; here each signal is written as PromQL over the version's metric names, so Prometheus raises the alert
that `diagnose` would name. The starter thresholds of observability.starter-alert-thresholds become plain
threshold alerts. Every rule carries its knowledge id and runbook text.
"""

from vllm_tune.tools.alerts.api import build_alerts
from vllm_tune.tools.alerts.models import AlertsInput, AlertsOutput

__all__ = ["AlertsInput", "AlertsOutput", "build_alerts"]
