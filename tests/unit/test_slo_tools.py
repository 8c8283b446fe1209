"""run_benchmark, what_if and tune_start take one SLO: the same spellings, the same refusals in the same words,
and saved results from before still load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from vllm_tune.cli.main import build_parser
from vllm_tune.tools.bench.api import RunBenchmarkInput
from vllm_tune.tools.bench.capacity import CurvePoint, _decided_by
from vllm_tune.tools.bench.metrics import slo_checks
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.slo import goodput_slo
from vllm_tune.tools.tune.models import TuneStartInput, TuneWorkload
from vllm_tune.tools.whatif.api import WhatIfInput

ROOT = Path(__file__).resolve().parents[2]


def _bench(slo: Any, **kw: Any) -> RunBenchmarkInput:
    return RunBenchmarkInput(url="http://127.0.0.1:8000", concurrency=1, slo=slo, **kw)


def _whatif(slo: Any, **kw: Any) -> WhatIfInput:
    return WhatIfInput(calibration="cal.json", slo=slo, **kw)


def _tune(slo: Any, **kw: Any) -> TuneStartInput:
    return TuneStartInput(command="vllm serve m", workload=TuneWorkload(concurrency=1), slo=slo, **kw)


TOOLS = [_bench, _whatif, _tune]


@pytest.mark.parametrize("given", [
    {"ttft": 500, "tpot": 50},
    {"ttft_ms": 500, "tpot_ms": 50.0},
    {"tpot": "50", "ttft": "500"},
    "ttft:500 tpot:50",
    "ttft=500,tpot=50",
    ["ttft:500", "tpot:50"],
    "ttft=500ms, tpot:50",
])
def test_every_spelling_means_the_same_slo_in_every_tool(given: Any) -> None:
    for make in TOOLS:
        assert make(given).slo == {"ttft": 500.0, "tpot": 50.0}, make.__name__
    assert goodput_slo(given) == {"ttft": 500.0, "tpot": 50.0}


def _error(make: Any, slo: Any) -> str:
    with pytest.raises(ValidationError) as info:
        make(slo)
    first = info.value.errors()[0]
    assert first["loc"] == ("slo",)
    return str(first["msg"])


@pytest.mark.parametrize("bad, fragment", [
    ({"itl": 15}, "ITL is not a per-request value"),
    ("itl:15", "ITL is not a per-request value"),
    ({"latency": 5}, "unknown SLO key 'latency'"),
    ({"ttft": -1}, "must be a positive number of milliseconds"),
    ({"ttft": 0}, "must be a positive number of milliseconds"),
    ({"ttft": "fast"}, "is not a number"),
    ({"ttft": True}, "is not a number"),
    ("ttft", "expected METRIC=MS or METRIC:MS"),
    ("ttft=5,ttft:6", "given twice"),
    ({"ttft": 5, "ttft_ms": 6}, "given twice"),
    (5, "expected an object of milliseconds"),
])
def test_every_tool_refuses_a_bad_slo_with_the_same_line(bad: Any, fragment: str) -> None:
    messages = {_error(make, bad) for make in TOOLS}
    assert len(messages) == 1, messages
    (message,) = messages
    assert fragment in message and "\n" not in message
    with pytest.raises(BadInputError) as direct:
        goodput_slo(bad)
    assert str(direct.value) in message  # the same words the CLIs print


def test_a_capacity_search_needs_an_slo_in_both_tools_that_search() -> None:
    messages = set()
    for make in (_bench, _whatif):
        with pytest.raises(ValidationError) as info:
            make({}, search_capacity=True)
        messages.add(info.value.errors()[0]["msg"])
    assert len(messages) == 1 and "search_capacity needs an SLO" in messages.pop()
    assert _bench("ttft:500", search_capacity=True).search_capacity


def test_mcp_publishes_the_slo_as_a_plain_object_of_numbers() -> None:
    models: list[type[BaseModel]] = [RunBenchmarkInput, WhatIfInput, TuneStartInput]
    for model in models:
        prop = model.model_json_schema()["properties"]["slo"]
        assert prop["type"] == "object" and prop["additionalProperties"] == {"type": "number"}, model.__name__
        assert all(k in prop["description"] for k in ("ttft", "tpot", "e2el")), model.__name__


def test_the_clis_read_slo_and_goodput_the_same_way() -> None:
    from vllm_tune.cli.common import slo_from_args

    parser = build_parser()
    lines = [["bench", "http://127.0.0.1:8000", "--goodput", "ttft:500", "tpot:50"],
             ["bench", "http://127.0.0.1:8000", "--slo", "ttft=500,tpot=50"],
             ["whatif", "--calibration", "c.json", "--goodput", "ttft:500", "tpot:50"],
             ["whatif", "--calibration", "c.json", "--slo", "ttft=500", "--goodput", "tpot:50"],
             ["tune", "start", "--command", "vllm serve m", "--concurrency", "1", "--goodput", "ttft:500", "tpot:50"],
             ["tune", "start", "--command", "vllm serve m", "--concurrency", "1", "--slo", "ttft=500,tpot=50"]]
    for argv in lines:
        assert slo_from_args(parser.parse_args(argv)) == {"ttft": 500.0, "tpot": 50.0}, argv
    for argv in (["bench", "http://127.0.0.1:8000", "--goodput", "itl:5"],
                 ["whatif", "--calibration", "c.json", "--goodput", "itl:5"],
                 ["tune", "start", "--command", "vllm serve m", "--concurrency", "1", "--slo", "itl=5"]):
        with pytest.raises(BadInputError, match="ITL is not a per-request value"):
            slo_from_args(parser.parse_args(argv))


def test_saved_results_from_before_still_load(tmp_path: Path) -> None:
    from vllm_tune.tools.bench.api import BenchResult
    from vllm_tune.tools.bench.capacity import CapacityResult
    from vllm_tune.tools.compare.load import load_run

    for path in sorted((ROOT / "knowledge" / "samples" / "runs").glob("*.json")):
        assert load_run(str(path)).completed > 0
    # A result saved before slo_percentile and slo_checks were written: slo_ms only, as a plain dict.
    old = json.loads(sorted((ROOT / "knowledge" / "samples" / "runs").glob("*.json"))[0].read_text())
    old["slo_ms"] = {"ttft": 500.0}
    (tmp_path / "old.json").write_text(json.dumps(old))
    run = load_run(str(tmp_path / "old.json"))
    assert run.data["slo_ms"] == {"ttft": 500.0} and BenchResult.model_validate(run.data).completed == run.completed
    capacity = CapacityResult.model_validate({"variable": "rate", "slo_ms": {"ttft": 500.0}, "slo_percentile": 99.0,
                                              "capacity": 2.0, "confidence": "2 req/s met the SLO in 2/2 runs"})
    assert capacity.decided_by == [] and _bench(capacity.slo_ms).slo == capacity.slo_ms


def test_results_say_which_target_and_percentile_decided() -> None:
    result = {"p95_ttft_ms": 420.0, "p95_tpot_ms": 61.0}
    checks = slo_checks(result, {"ttft": 500.0, "tpot": 50.0}, 95.0)
    assert [(c.metric, c.status, c.percentile) for c in checks] == [("ttft", "met", 95.0), ("tpot", "violated", 95.0)]
    assert checks[1].decided_by == "tpot p95 61.0 ms > 50 ms"
    assert slo_checks({}, {"e2el": 900.0}, 99.0)[0].status == "unknown"

    def point(value: float, ttft: float, ok: bool) -> CurvePoint:
        return CurvePoint(variable="rate", value=value, phase="confirm", achieved_request_throughput=value,
                          output_throughput=0.0, request_goodput=None, completed=100, failed=0,
                          latencies_ms={"p99_ttft": ttft}, meets_slo=ok, saturated=False,
                          violations=[] if ok else [f"p99 ttft {ttft:.1f} ms > 500 ms"])

    decided = _decided_by({"ttft": 500.0}, "p99", "req/s", 4.0, [point(4, 410, True), point(4, 455.5, True)], 6.0,
                          [point(6, 480, True), point(6, 730, False)])
    assert decided == ["at 4 req/s: p99 ttft up to 455.5 ms <= 500 ms in every run",
                       "at 6 req/s: p99 ttft 730.0 ms > 500 ms"]


def test_the_bench_summary_names_the_targets_and_the_percentile() -> None:
    from vllm_tune.tools.bench.api import BenchResult, RunBenchmarkOutput
    from vllm_tune.tools.bench.render import render_summary

    data = json.loads(sorted((ROOT / "knowledge" / "samples" / "runs").glob("*.json"))[0].read_text())
    slo = {"ttft": 500.0, "e2el": 1.0}
    data["slo_ms"], data["slo_percentile"] = slo, 99.0
    data["slo_checks"] = [c.model_dump(mode="json") for c in slo_checks(data, slo, 99.0)]
    text = render_summary(RunBenchmarkOutput(run_id="r", state="completed", result=BenchResult.model_validate(data)))
    assert "goodput counts requests meeting every target (ttft<=500 ms, e2el<=1 ms), per request" in text
    assert f"violated: e2el p99 {data['p99_e2el_ms']:.1f} ms > 1 ms" in text
    from vllm_tune.tools.bench.capacity import CapacityResult

    capacity = CapacityResult(variable="rate", slo_ms={"ttft": 500.0}, slo_percentile=95.0, capacity=4.0,
                              confidence="4 req/s met the SLO in 2/2 runs",
                              decided_by=["at 4 req/s: p95 ttft up to 455.5 ms <= 500 ms in every run"])
    text = render_summary(RunBenchmarkOutput(run_id="r", state="completed", capacity=capacity))
    assert "SLO ttft<=500 ms at p95; decided by: at 4 req/s: p95 ttft up to 455.5 ms <= 500 ms in every run" in text


@pytest.mark.anyio
@pytest.mark.parametrize("pct, judged, noted", [(99.0, 99, False), (95.0, 95, False), (97.5, 90, True)])
async def test_a_runs_own_diagnosis_judges_its_slo_at_the_runs_percentile(pct: float, judged: int,
                                                                           noted: bool) -> None:
    from vllm_tune.tools.bench.server_watch import Scrape, ServerWatch, ServerWindow, attach_diagnosis

    sample = ROOT / "knowledge" / "samples" / "overload"
    watch = ServerWatch(client=None)  # type: ignore[arg-type]  # nothing is fetched: the scrapes are given
    watch.first_text, watch.last_text = (sample / "before.prom").read_text(), (sample / "after.prom").read_text()
    watch.scrapes = [Scrape(t=0.0), Scrape(t=21.39)]
    window = ServerWindow()
    await attach_diagnosis(window, watch, slo_ms={"ttft": 500.0}, serve_flags={}, slo_percentile=pct)
    assert window.diagnosis is not None, window.notes
    assert window.diagnosis["slo_percentile"] == judged and window.diagnosis["slo"]["ttft"]["percentile"] == judged
    assert any("judges the SLO at p90" in n for n in window.notes) == noted
