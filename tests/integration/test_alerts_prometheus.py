"""alerts against the real tools: promtool checks every generated file, and a real Prometheus scraping a real
vLLM 0.32 CPU server evaluates the rules, stays quiet at idle and raises the capacity alert under overload."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from support import load
from support.prometheus import PrometheusServer, prometheus_binary, start_prometheus
from support.vllm_env import PROVISION_HINT
from support.vllm_server import VllmFactory

from vllm_tune.cli.main import main
from vllm_tune.tools.alerts import AlertsInput, build_alerts
from vllm_tune.tools.diagnose.models import ServeFlags
from vllm_tune.tools.slo import SloTargets

pytestmark = pytest.mark.integration


def promtool() -> str:
    binary = prometheus_binary()
    beside = Path(binary).with_name("promtool") if binary else None
    found = str(beside) if beside is not None and beside.exists() else shutil.which("promtool")
    if found is None:
        pytest.fail(f"promtool not found (Debian's prometheus package ships it); {PROVISION_HINT}", pytrace=False)
    return found


def check_rules(path: Path) -> str:
    proc = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.parametrize("request_args", [
    {"vllm_version": "0.32.0"},
    {"vllm_version": "0.34.0", "selector": 'job="vllm",namespace=~"prod.*"', "for_duration": "0s"},
    {"vllm_version": "0.10.0", "range": "1m", "group_by": ["pod", "model_name"]},
    {"vllm_version": "0.9.0", "slo": SloTargets(ttft=500, itl=30, tpot=40, e2el=9000), "slo_percentile": 99,
     "serve_flags": ServeFlags(max_num_seqs=8, max_num_batched_tokens=2048, max_cudagraph_capture_size=64)},
    {"serve_flags": ServeFlags(max_num_seqs=8, max_num_batched_tokens=2048, max_cudagraph_capture_size=64)},
])
def test_generated_rules_pass_promtool(tmp_path: Path, request_args: dict[str, Any]) -> None:
    out = build_alerts(AlertsInput(**request_args))
    path = tmp_path / "rules.yml"
    path.write_text(out.text)
    assert f"SUCCESS: {len(out.rules)} rules found" in check_rules(path)


def test_every_dashboard_expr_parses(tmp_path: Path) -> None:
    for version in ("0.9.0", "0.32.0", "0.34.0"):
        board = json.loads(build_alerts(AlertsInput(format="grafana", vllm_version=version,
                                                    selector='job="vllm"')).text)
        exprs = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
        # promtool has no offline query parser; a recording rule per expression makes `check rules` parse each
        rules = [{"record": f"vllm_tune:panel_{i}", "expr": e} for i, e in enumerate(exprs)]
        path = tmp_path / f"dashboard-{version}.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
        assert f"SUCCESS: {len(exprs)} rules found" in check_rules(path)


def _alerts(prom: PrometheusServer) -> list[dict[str, Any]]:
    resp = httpx.get(prom.url + "/api/v1/alerts", timeout=5)
    resp.raise_for_status()
    found: list[dict[str, Any]] = resp.json()["data"]["alerts"]
    return found


def _rules(prom: PrometheusServer) -> list[dict[str, Any]]:
    resp = httpx.get(prom.url + "/api/v1/rules", timeout=5)
    resp.raise_for_status()
    return [r for g in resp.json()["data"]["groups"] for r in g["rules"]]


def _wait_evaluated(prom: PrometheusServer, n_rules: int, timeout_s: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        rules = _rules(prom)
        if len(rules) == n_rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules):
            return rules
        assert time.monotonic() < deadline, f"rules not loaded/evaluated: {len(rules)} of {n_rules}"
        time.sleep(0.5)


def _alert_history(prom: PrometheusServer, start: float, end: float) -> dict[tuple[str, str], list[float]]:
    """Prometheus records every pending and firing alert as an ALERTS series: (alertname, state) -> times."""
    resp = httpx.get(prom.url + "/api/v1/query_range", timeout=10, params={
        "query": 'ALERTS{source="vllm-tune"}', "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "0.5"})
    resp.raise_for_status()
    out: dict[tuple[str, str], list[float]] = {}
    for series in resp.json()["data"]["result"]:
        key = (series["metric"]["alertname"], series["metric"]["alertstate"])
        out.setdefault(key, []).extend(float(t) for t, _ in series["values"])
    return out


def test_overload_raises_the_capacity_alert(vllm_server_factory: VllmFactory, tmp_path: Path) -> None:
    server = vllm_server_factory(list(load.overload.server_args))
    warm = load.drive(server.url, server.model, requests=1, max_tokens=4)
    assert warm.completed == 1, warm.errors
    path = tmp_path / "rules.yml"
    assert main(["alerts", "--vllm-version", "0.32.0", "--for", "2s", "--range", "15s", "--max-num-seqs", "2",
                 "--out", str(path)]) == 0
    n_rules = sum(len(g["rules"]) for g in yaml.safe_load(path.read_text())["groups"])
    target, starter = "VllmTtftHighQueueGrowing", "VllmQueueTimeP99High"
    with start_prometheus([server.url], scrape_interval_s=1, rule_files=[path], evaluation_interval_s=1) as prom:
        prom.wait_for_series("vllm:num_requests_running")
        time.sleep(3)  # a few evaluations over idle scrapes
        rules = _wait_evaluated(prom, n_rules)
        assert [r["name"] for r in rules if r["health"] != "ok"] == []
        assert _alerts(prom) == []  # idle: nothing pending or firing
        start = time.time()
        # 60 long requests on 2 slots keep a deep queue for half a minute: the TTFT p90 over every 15 s window
        # stays far above the 3 s target long enough for `for: 2s` on any machine
        result = load.drive(server.url, server.model, requests=60, max_tokens=256, concurrency=60,
                            time_limit_s=240)
        assert result.failed == 0 and result.completed == 60, result.errors
        time.sleep(3)  # the last evaluations over the tail of the load
        history = _alert_history(prom, start - 2, time.time())
        preempted = prom.query("sum(vllm:num_preemptions_total)")
        final_rules = {r["name"]: r for r in _rules(prom)}

    firing = sorted(name for name, state in history if state == "firing")
    assert (target, "firing") in history, f"{target} never fired; firing: {firing}"
    # pending first: the condition held `for` 2 s before the alert fired
    assert min(history[(target, "pending")]) + 2 - 0.5 <= min(history[(target, "firing")])
    rule = final_rules[target]
    assert rule["labels"]["knowledge_id"] == "triage.ttft-high-queue-growing"
    assert rule["labels"]["severity"] == "critical"
    assert "--max-num-seqs" in rule["annotations"]["runbook"]
    assert rule["annotations"]["knowledge_id"] == "triage.ttft-high-queue-growing"
    assert (starter, "firing") in history
    assert final_rules[starter]["labels"]["knowledge_id"] == "observability.starter-alert-thresholds"
    # no preemption at --max-num-seqs 2 with a 1 GiB KV cache, so the thrash rule must stay quiet
    assert float(preempted[0]["value"][1]) == 0
    assert not any(name == "VllmPreemptionKvThrash" for name, _ in history)
    assert [name for name, r in final_rules.items() if r["health"] != "ok"] == []
