"""alerts: rules and dashboard built from the knowledge base (structure, names by version, inputs).

promtool and a live Prometheus check the PromQL itself in tests/integration/test_alerts_prometheus.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from vllm_tune.cli.main import main
from vllm_tune.tools.alerts import AlertsInput, build_alerts
from vllm_tune.tools.alerts.names import MetricNames
from vllm_tune.tools.alerts.rules import alert_name
from vllm_tune.tools.alerts.starter import ENTRY_ID, THRESHOLDS
from vllm_tune.tools.diagnose.models import ServeFlags
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.slo import SloTargets

SERIES = re.compile(r"(vllm:[a-z_]+|http_requests_total)(\{[^}]*\})?")


def rules_doc(**kwargs: object) -> list[dict[str, object]]:
    out = build_alerts(AlertsInput.model_validate(kwargs))
    doc = yaml.safe_load(out.text)
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_names_follow_the_version_ranges_of_the_metric_entries() -> None:
    kb = load_knowledge()
    old, mid, new = MetricNames(kb, "0.9.0"), MetricNames(kb, "0.10.0"), MetricNames(kb, "0.32.0")
    assert old.resolve("vllm:kv_cache_usage_perc") == "vllm:gpu_cache_usage_perc"
    assert old.resolve("vllm:prefix_cache_hits_total") == "vllm:gpu_prefix_cache_hits_total"
    assert old.resolve("vllm:inter_token_latency_seconds") == "vllm:time_per_output_token_seconds"
    # 0.10 exports both KV names (deprecated in 0.9.2, hidden later): the current one is preferred
    assert mid.resolve("vllm:kv_cache_usage_perc") == "vllm:kv_cache_usage_perc"
    assert mid.resolve("vllm:inter_token_latency_seconds") == "vllm:time_per_output_token_seconds"
    assert new.resolve("vllm:inter_token_latency_seconds") == "vllm:inter_token_latency_seconds"
    # no name for per-request TPOT before 0.11, and none for a series the version lacks
    assert old.resolve("vllm:request_time_per_output_token_seconds") is None
    assert new.resolve("vllm:num_requests_waiting_by_reason") == "vllm:num_requests_waiting_by_reason"
    assert MetricNames(kb, "0.20.0").resolve("vllm:num_requests_waiting_by_reason") is None
    assert new.knowledge_id("vllm:kv_cache_usage_perc") == "metric.kv-cache-usage-perc"


def exprs(**kwargs: object) -> str:
    return "\n".join(str(r["expr"]) for r in rules_doc(**kwargs))


def test_old_version_rules_read_old_names_only() -> None:
    text = exprs(vllm_version="0.9.0")
    assert "vllm:gpu_cache_usage_perc" in text and "vllm:kv_cache_usage_perc" not in text
    text = exprs(vllm_version="0.10.0")  # the starter ITL thresholds hold from 0.10
    assert "vllm:time_per_output_token_seconds_bucket" in text
    assert "vllm:inter_token_latency_seconds" not in text
    current = {name for name, _ in SERIES.findall(exprs(vllm_version="0.32.0"))}
    assert "vllm:kv_cache_usage_perc" in current and "vllm:gpu_cache_usage_perc" not in current


def test_every_triage_entry_is_a_rule_or_skipped_with_a_reason() -> None:
    kb = load_knowledge()
    out = build_alerts(AlertsInput(vllm_version="0.32.0"))
    triage = [e for e in kb if e.kind == "triage"]
    made = {r.knowledge_id for r in out.rules if r.origin == "triage"}
    skipped = {s.knowledge_id: s.reason for s in out.skipped}
    for entry in triage:
        assert (entry.id in made) != (entry.id in skipped), entry.id
        if entry.id in skipped:
            assert skipped[entry.id]
    assert {"triage.ttft-high-queue-growing", "triage.preemption-kv-thrash",
            "triage.tpot-high-decode-bound"} <= made
    assert "needs --max-num-seqs" in skipped["triage.running-below-limit-stall"]
    assert "triage.admission-rejections" in made  # the counter exists from 0.32 on
    older = build_alerts(AlertsInput(vllm_version="0.31.0"))
    assert "not 0.31.0" in {s.knowledge_id: s.reason for s in older.skipped}["triage.admission-rejections"]
    assert "server log" in skipped["triage.moe-default-config"]
    names = [r.alert for r in out.rules]
    assert len(names) == len(set(names))


def test_rules_carry_knowledge_id_runbook_and_the_entry_text() -> None:
    kb = load_knowledge()
    rules = rules_doc(vllm_version="0.32.0")
    by_name = {r["alert"]: r for r in rules}
    rule = by_name["VllmTtftHighQueueGrowing"]
    entry = kb.get("triage.ttft-high-queue-growing")
    assert rule["labels"] == {"severity": "critical", "knowledge_id": entry.id, "source": "vllm-tune"}
    ann = rule["annotations"]
    assert ann["knowledge_id"] == entry.id
    assert ann["description"].startswith(" ".join(entry.statement.split()))
    assert "--max-num-seqs" in ann["runbook"] and "attributed claim" in ann["runbook"]
    assert "{{ $labels.instance }}" in ann["summary"]
    # three conditions joined with `and`, with the entry's thresholds
    assert rule["expr"].count("\n  and\n") == 2
    assert ") > 1\n" in rule["expr"] and ">= 1\n" in rule["expr"] and rule["expr"].endswith(">= 0.5")
    assert rule["for"] == "5m"
    thrash = by_name["VllmPreemptionKvThrash"]
    assert "\n  or\n" in thrash["expr"]  # match: any
    for r in rules:
        assert r["labels"]["knowledge_id"] in kb and r["annotations"]["runbook"], r["alert"]


def test_flags_enable_the_rules_that_need_them_and_for_overrides() -> None:
    out = build_alerts(AlertsInput(vllm_version="0.32.0", for_duration="0s",
                                   serve_flags=ServeFlags(max_num_seqs=8, max_cudagraph_capture_size=64)))
    made = {r.knowledge_id: r for r in out.rules}
    stall = made["triage.running-below-limit-stall"]
    assert "/ 8)" in stall.expr and "vllm:num_requests_running" in stall.expr
    assert "triage.client-concurrency-bound" in made and "triage.itl-spikes-graph-miss" in made
    assert {r.for_duration for r in out.rules} == {"0s"}
    eager = build_alerts(AlertsInput(vllm_version="0.32.0", serve_flags=ServeFlags(
        max_cudagraph_capture_size=64, enforce_eager=True)))
    assert "triage.itl-spikes-graph-miss" not in {r.knowledge_id for r in eager.rules}


def test_starter_thresholds_are_the_entry_s_own_words_and_numbers() -> None:
    entry = load_knowledge().get(ENTRY_ID)
    statement = " ".join(entry.statement.split())
    for t in THRESHOLDS:
        assert t.quote in statement, t.alert
        shown = {f"{t.value:g}", f"{t.value * 1000:g}", f"{t.value * 100:g}", f"{t.value:.2f}"}
        assert t.value == 0 or any(s in t.quote for s in shown), (t.alert, t.value, t.quote)
    rules = {r["alert"]: r for r in rules_doc(vllm_version="0.32.0")}
    assert rules["VllmKvCacheUsageCritical"]["for"] == "15m"  # "page above 0.95 for 15 minutes"
    assert rules["VllmQueueTimeP99Critical"]["for"] == "10m"
    assert rules["VllmKvCacheUsageCritical"]["expr"].endswith("> 0.95")


def test_slo_and_percentile_reach_the_triage_rules() -> None:
    out = build_alerts(AlertsInput(vllm_version="0.32.0", slo=SloTargets(ttft=500, tpot=40), slo_percentile=99))
    rule = next(r for r in out.rules if r.knowledge_id == "triage.ttft-high-queue-growing")
    assert rule.expr.startswith("((histogram_quantile(0.99,") and "/ 0.5))" in rule.expr
    decode = next(r for r in out.rules if r.knowledge_id == "triage.tpot-high-decode-bound")
    assert "/ 0.04))" in decode.expr
    assert any("p99" in n for n in out.notes)
    # a target left out takes diagnose's default, so a TTFT-only SLO still judges decode against TPOT 200 ms
    ttft_only = build_alerts(AlertsInput(vllm_version="0.32.0", slo=SloTargets(ttft=500)))
    decode = next(r for r in ttft_only.rules if r.knowledge_id == "triage.tpot-high-decode-bound")
    assert "/ 0.2))" in decode.expr and "/ 0.5))" in decode.expr
    assert any("itl, tpot" in n and "default" in n for n in ttft_only.notes)
    # the decode rule reads the decode target the SLO names (ITL here), else the larger of TPOT and ITL ratios
    itl_only = build_alerts(AlertsInput(vllm_version="0.32.0", slo=SloTargets(itl=15)))
    decode = next(r for r in itl_only.rules if r.knowledge_id == "triage.tpot-high-decode-bound")
    first = decode.expr.split("\n")[0]
    assert "inter_token_latency_seconds" in first and "/ 0.015))" in first and "time_per_output" not in first
    default = build_alerts(AlertsInput(vllm_version="0.32.0"))
    assert any("default interactive" in n for n in default.notes)
    decode = next(r for r in default.rules if r.knowledge_id == "triage.tpot-high-decode-bound")
    assert ">=" in decode.expr.split("\n")[0] and ") or (" in decode.expr.split("\n")[0]


def test_selector_reaches_every_series() -> None:
    body = exprs(vllm_version="0.32.0", selector='job="vllm",namespace=~"prod.*"')
    refs = SERIES.findall(body)
    assert refs
    for name, matchers in refs:
        assert matchers.startswith('{job="vllm",namespace=~"prod.*"'), (name, matchers)
    assert '{__name__=~"vllm:(' in body and ')",job="vllm",namespace=~"prod.*"}' in body


def test_dashboard_has_the_structure_grafana_needs() -> None:
    out = build_alerts(AlertsInput(format="grafana", vllm_version="0.32.0", selector='job="vllm"'))
    board = json.loads(out.text)
    assert board["uid"] and len(board["uid"]) <= 40 and board["title"]
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    panels = board["panels"]
    assert out.panels == len(panels) >= 10
    assert len({p["id"] for p in panels}) == len(panels)
    titles = " ".join(p["title"] for p in panels)
    for word in ("TTFT", "ITL", "E2EL", "running and waiting", "KV-cache", "Preemptions", "throughput"):
        assert word in titles
    for p in panels:
        assert p["type"] == "timeseries" and set(p["gridPos"]) == {"h", "w", "x", "y"}
        assert p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"])
        assert p["datasource"]["uid"] == "${datasource}"
    assert board["templating"]["list"][0]["type"] == "datasource"
    ttft = next(p for p in panels if "TTFT" in p["title"])
    assert [t["expr"].split(",")[0] for t in ttft["targets"]] == [
        "histogram_quantile(0.5", "histogram_quantile(0.9", "histogram_quantile(0.99"]
    assert "rate(vllm:time_to_first_token_seconds_bucket{job=\"vllm\"}[5m])" in ttft["targets"][0]["expr"]
    old = json.loads(build_alerts(AlertsInput(format="grafana", vllm_version="0.9.0")).text)
    exprs = " ".join(t["expr"] for p in old["panels"] for t in p["targets"])
    assert "gpu_cache_usage_perc" in exprs and "kv_cache_usage_perc" not in exprs


@pytest.mark.parametrize("kwargs", [{"range": "0s"}, {"range": "5 minutes"}, {"for_duration": "soon"},
                                    {"group_by": ["le"]}, {"group_by": ["bad-label"]}, {"format": "json"}])
def test_bad_inputs_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        AlertsInput.model_validate(kwargs)


def test_bad_selector_and_version_are_one_line_errors() -> None:
    with pytest.raises(BadInputError, match="bad label selector"):
        build_alerts(AlertsInput(selector="job=vllm"))
    with pytest.raises(BadInputError, match="not a version"):
        build_alerts(AlertsInput(vllm_version="latest"))


def test_cli_writes_the_file_and_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rules.yml"
    assert main(["alerts", "--vllm-version", "0.32.0", "--for", "1m", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert {g["name"] for g in doc["groups"]} == {"vllm-tune-triage", "vllm-tune-starter-thresholds"}
    assert "rules" in capsys.readouterr().err
    assert main(["alerts", "--format", "grafana"]) == 0
    assert json.loads(capsys.readouterr().out)["panels"]
    assert main(["alerts", "--selector", "job="]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad label selector" in err
    assert main(["alerts", "--range", "0s"]) == 2
    assert main(["alerts", "--out", str(tmp_path / "missing" / "x.yml")]) == 2


def test_alert_names_are_stable_camel_case() -> None:
    assert alert_name("triage.ttft-high-queue-growing") == "VllmTtftHighQueueGrowing"
    assert alert_name("triage.kv-cache-too-small-for-max-num-seqs") == "VllmKvCacheTooSmallForMaxNumSeqs"
