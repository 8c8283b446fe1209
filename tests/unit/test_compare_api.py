"""compare_runs on result files: formats, comparability checks, verdicts, the server "why", CLI and MCP.

Our own result files are built the way `vllm-tune bench` builds them: per-request records through
tools.bench.metrics.compute_metrics, plus the provenance/client_check/server blocks it adds.
"""

from __future__ import annotations

import copy
import json
import os
import random
from array import array
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server import MCPServer

from vllm_tune.cli.main import main
from vllm_tune.server.compare import register
from vllm_tune.tools.bench.metrics import compute_metrics
from vllm_tune.tools.bench.records import RequestRecord
from vllm_tune.tools.bench.store import ResultStore, RunStatus
from vllm_tune.tools.compare.api import CompareInput, CompareOutput, compare_runs
from vllm_tune.tools.compare.load import load_run
from vllm_tune.tools.compare.render import render_text
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.kb import load_knowledge

SAMPLE = Path(__file__).parent / "data" / "vllm_bench_serve_0.32_result.json"
RUN_ID = "20261204-010203-abcdef"


def make_result(*, ttft_s: float = 0.010, n: int = 250, out: int = 8, prompt: int = 16, itl_s: float = 0.005,
                seed: int = 0, jitter: float = 0.002, rate: float | str = "inf", concurrency: int | None = 4,
                version: str = "0.32.0", flags: dict[str, str] | None = None, host: str = "client-a",
                server: dict[str, Any] | None = None, failed: int = 0, **extra: Any) -> dict[str, Any]:
    rng = random.Random(seed)
    records = []
    for i in range(n + failed):
        ok = i < n
        ttft = ttft_s + rng.uniform(0, jitter)
        gaps = [itl_s] * (out - 1)
        records.append(RequestRecord(index=i, intended_send=i * 0.01, start_time=i * 0.01, success=ok,
                                     error="" if ok else "HTTP 500", prompt_len=prompt, output_len=out if ok else 0,
                                     ttft=ttft, latency=ttft + sum(gaps), itl=array("d", gaps)))
    result: dict[str, Any] = {"date": "20261204-010203", "backend": "vllm", "endpoint_type": "vllm", "label": None,
                              "model_id": "test-model", "tokenizer_id": "test-model", "num_prompts": n + failed,
                              "request_rate": rate, "burstiness": 1.0, "max_concurrency": concurrency}
    result.update(compute_metrics(records, n * 0.01 + 0.1, percentiles=[50.0, 90.0, 99.0]))
    result["client_check"] = {"client_limited": False, "reasons": [], "stop_reason": "done", "warmup_requests": 1}
    result["provenance"] = {
        "server_url": "http://127.0.0.1:8000", "server_version": version, "model": "test-model",
        "serve_flags_from_metrics": {"block_size": "16"}, "serve_flags_from_caller": flags or {},
        "client_host": host, "seed": 0,
        "workload": {"kind": "random", "input_len": prompt, "output_len": out, "endpoint": "completions",
                     "ignore_eos": True, "seed": 0},
        "load": {"phase": "measure", "rate": None, "concurrency": concurrency, "arrival": "poisson",
                 "burstiness": 1.0, "duration_s": None}}
    if server is not None:
        result["server"] = {"scrapes": 5, **server}
    result["vllm_tune"] = {"run_id": RUN_ID, "kind": "benchmark"}
    result.update(extra)
    return result


def write(tmp: Path, name: str, data: dict[str, Any]) -> str:
    path = tmp / name
    path.write_text(json.dumps(data))
    return str(path)


def compare(*paths: str, **kw: Any) -> CompareOutput:
    return compare_runs(CompareInput(runs=list(paths), **kw))


def rows(out: CompareOutput, index: int = 0) -> dict[str, Any]:
    return {f"{m.metric} {m.statistic}": m for m in out.comparisons[index].metrics}


def check_ids(out: CompareOutput, index: int = 0) -> dict[str, str]:
    return {c.id: c.severity for c in out.comparisons[index].checks}


# ---------------------------------------------------------------- formats and references


def test_vllm_bench_serve_sample_is_recognised_and_truncated_arrays_are_refused() -> None:
    run = load_run(str(SAMPLE))
    assert run.format == "vllm-bench-serve" and not run.detailed
    assert run.ttfts is None and run.e2els is None  # the sample keeps 3 latencies for 50 requests
    assert any("3 values for 50 completed" in n for n in run.notes)


def test_sample_against_itself_is_within_noise_on_threshold_basis_and_flagged() -> None:
    out = compare(str(SAMPLE), str(SAMPLE))
    c = out.comparisons[0]
    assert c.overall == "within-noise"
    assert all(m.verdict == "within-noise" and m.basis == "threshold" and m.delta == 0 for m in c.metrics)
    ids = check_ids(out)
    assert ids["run.same-file"] == "caution" and ids["requests.few.baseline"] == "caution"
    assert out.runs[0].format == "vllm-bench-serve" and out.runs[0].per_request == []
    assert {"ttft p50", "ttft p90", "ttft p99", "e2el mean", "request_throughput value"} <= set(rows(out))
    assert "request_goodput value" not in rows(out)  # no SLO in either run: nothing to say
    assert "comparison.single-run-noise-threshold" in c.knowledge_ids


def test_sample_with_slower_ttft_is_worse_by_threshold_but_p99_of_50_requests_is_not_judged(tmp_path: Path) -> None:
    data = json.loads(SAMPLE.read_text())
    slower = copy.deepcopy(data)
    for key in [k for k in data if k.endswith("_ttft_ms") and not k.startswith("std")]:
        slower[key] = data[key] * 1.2
    out = compare(str(SAMPLE), write(tmp_path, "slow.json", slower))
    r = rows(out)
    assert r["ttft mean"].verdict == "worse" and r["ttft mean"].basis == "threshold"
    assert r["ttft mean"].delta_pct == pytest.approx(20.0)
    assert r["ttft p90"].verdict == "worse"
    assert r["ttft p99"].verdict == "within-noise" and "unstable" in (r["ttft p99"].note or "")
    assert r["tpot mean"].verdict == "within-noise"
    assert out.comparisons[0].overall == "worse"
    assert "threshold verdicts only" in out.comparisons[0].summary


def test_detailed_vllm_arrays_drop_failed_requests_and_give_tpot(tmp_path: Path) -> None:
    data = json.loads(SAMPLE.read_text())
    data.update(completed=3, failed=1, num_prompts=4, ttfts=[0.02, 0.0, 0.03, 0.04],
                latencies=[0.12, 0.0, 0.13, 0.05], output_lens=[11, 0, 11, 1], errors=["", "boom", "", ""],
                input_lens=[10, 10, 10, 10])
    run = load_run(write(tmp_path, "detailed.json", data))
    assert run.detailed and run.format == "vllm-bench-serve"
    assert run.ttfts == [0.02, 0.03, 0.04] and run.e2els == [0.12, 0.13, 0.05]
    assert run.tpots == pytest.approx([0.01, 0.01])  # the one-token output has no TPOT


def test_our_result_keeps_per_request_arrays_and_run_folders_and_ids_resolve(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    store = ResultStore(tmp_path)
    path = store.write_result(RUN_ID, make_result())
    run = load_run(str(path.parent))
    assert run.format == "vllm-tune-benchmark" and run.ttfts is not None and len(run.ttfts) == 250
    monkeypatch.setenv("VLLM_TUNE_RESULTS_DIR", str(tmp_path))
    assert load_run(RUN_ID).path == path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not an object"),
        ('{"hello": 1}', "not a benchmark result"),
        ('{"completed": 3, "duration": 1, "request_throughput": 3}', "not a benchmark result"),
    ],
)
def test_bad_references_are_one_clear_line(tmp_path: Path, content: str | None, message: str) -> None:
    ref = str(tmp_path / "x.json")
    if content is not None:
        Path(ref).write_text(content)
    with pytest.raises(BadInputError, match=message):
        compare(str(SAMPLE), ref)


def test_run_folder_without_result_and_unfinished_run_id(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"no result\.json"):
        load_run(str(tmp_path))
    store = ResultStore(tmp_path)
    store.write_status(RunStatus(run_id=RUN_ID, state="running", pid=os.getpid()))
    with pytest.raises(BadInputError, match="state: running"):
        load_run(RUN_ID, str(tmp_path))
    with pytest.raises(BadInputError, match="no benchmark run 20261204-010203-000000"):
        load_run("20261204-010203-000000", str(tmp_path))


def test_input_validation() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        CompareInput(runs=[str(SAMPLE)])
    with pytest.raises(ValueError, match="baseline index 2"):
        CompareInput(runs=[str(SAMPLE)] * 2, baseline=2)
    with pytest.raises(ValueError, match="unknown metric 'latency'"):
        CompareInput(runs=[str(SAMPLE)] * 2, metrics=["latency"])


# ---------------------------------------------------------------- verdicts with per-request data


def test_slower_ttft_is_worse_with_an_interval_excluding_zero(tmp_path: Path) -> None:
    base = write(tmp_path, "a.json", make_result(ttft_s=0.010, seed=1))
    cand = write(tmp_path, "b.json", make_result(ttft_s=0.012, seed=2))
    out = compare(base, cand, seed=3)
    r = rows(out)
    ttft = r["ttft mean"]
    assert ttft.verdict == "worse" and ttft.basis == "bootstrap"
    assert ttft.ci_low is not None and ttft.ci_high is not None and 1.5 < ttft.ci_low <= ttft.ci_high < 2.5
    assert r["e2el p50"].verdict == "worse" and r["e2el p50"].basis == "bootstrap"
    assert r["itl mean"].basis == "threshold" and r["itl mean"].verdict == "within-noise"
    assert out.comparisons[0].overall == "worse" and out.comparisons[0].resamples == 2000
    assert "comparison.bootstrap-difference-ci" in out.knowledge_ids
    again = compare(base, cand, seed=3)
    assert rows(again)["ttft p99"].ci_low == r["ttft p99"].ci_low  # seeded: same answer twice


def test_faster_candidate_is_better_and_baseline_index_is_honoured(tmp_path: Path) -> None:
    slow = write(tmp_path, "slow.json", make_result(ttft_s=0.020, seed=1))
    fast = write(tmp_path, "fast.json", make_result(ttft_s=0.010, seed=2))
    out = compare(fast, slow, baseline=1)
    assert out.baseline == 1 and out.comparisons[0].candidate == 0
    assert rows(out)["ttft p50"].verdict == "better"
    assert rows(out)["request_throughput value"].verdict == "within-noise"  # same schedule, same duration


def test_same_distribution_is_within_noise(tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", make_result(seed=1))
    b = write(tmp_path, "b.json", make_result(seed=2))
    out = compare(a, b)
    assert out.comparisons[0].overall == "within-noise"
    assert all(m.verdict == "within-noise" for m in out.comparisons[0].metrics)


# ---------------------------------------------------------------- comparability


def test_different_output_length_makes_every_verdict_not_comparable(tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", make_result(out=8))
    b = write(tmp_path, "b.json", make_result(out=16, ttft_s=0.02))
    out = compare(a, b)
    c = out.comparisons[0]
    assert check_ids(out)["workload.output_len"] == "blocking"
    assert c.overall == "not-comparable" and "output length" in c.summary
    assert {m.verdict for m in c.metrics} == {"not-comparable"}
    assert rows(out)["ttft mean"].delta is not None  # the numbers are still shown
    assert "benchmarking.workload-first" in c.knowledge_ids


def test_load_shape_and_client_limited_runs_are_blocking(tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", make_result(rate=10.0, concurrency=None))
    b = write(tmp_path, "b.json", make_result(rate=20.0, concurrency=None))
    assert check_ids(compare(a, b))["load.request_rate"] == "blocking"
    limited = make_result()
    limited["client_check"].update(client_limited=True, reasons=["p99 schedule lag 40.0 ms > 5 ms"])
    out = compare(write(tmp_path, "c.json", make_result()), write(tmp_path, "d.json", limited))
    chk = next(c for c in out.comparisons[0].checks if c.id == "client.limited.candidate")
    assert chk.severity == "blocking" and "schedule lag" in chk.message
    assert chk.knowledge_ids == ["comparison.client-limited-run"]
    assert out.comparisons[0].overall == "not-comparable"


def test_what_changed_on_the_server_is_reported_and_confounding_is_flagged(tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", make_result(flags={"max-num-seqs": "128"}))
    b = write(tmp_path, "b.json", make_result(flags={"max-num-seqs": "256"}, seed=5))
    out = compare(a, b)
    flags = next(c for c in out.comparisons[0].checks if c.id == "server.flags")
    assert flags.severity == "info" and "max-num-seqs: 128 -> 256" in flags.message
    assert flags.baseline == {"max-num-seqs": "128"} and flags.candidate == {"max-num-seqs": "256"}
    assert "server.several-changes" not in check_ids(out)
    c = write(tmp_path, "c.json", make_result(flags={"max-num-seqs": "256"}, version="0.34.0", host="client-b"))
    ids = check_ids(compare(a, c))
    assert ids["server.version"] == "info" and ids["server.several-changes"] == "caution"
    assert ids["client.host"] == "caution"


def test_failed_requests_and_small_runs_are_cautions(tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", make_result(n=250))
    b = write(tmp_path, "b.json", make_result(n=120, failed=5))
    ids = check_ids(compare(a, b))
    assert ids["requests.failed.candidate"] == "caution" and ids["requests.few.candidate"] == "caution"
    assert "requests.few.baseline" not in ids and ids["load.num_prompts"] == "caution"


def test_goodput_under_different_slos_is_not_compared(tmp_path: Path) -> None:
    a = make_result(slo_ms={"ttft": 50.0})
    a["request_goodput"] = 20.0
    b = make_result(slo_ms={"ttft": 100.0})
    b["request_goodput"] = 24.0
    r = rows(compare(write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)))
    goodput = r["request_goodput value"]
    assert goodput.verdict == "not-comparable" and "different SLOs" in (goodput.note or "")


# ---------------------------------------------------------------- capacity searches


def capacity(cap: float | None, *, slo: float = 500.0, knee_tp: float = 8.0) -> dict[str, Any]:
    knee = {"variable": "rate", "value": 8.0, "phase": "bisect", "achieved_request_throughput": knee_tp,
            "output_throughput": 100.0, "request_goodput": None, "completed": 100, "failed": 0,
            "latencies_ms": {"p99_e2el": 400.0}, "meets_slo": True, "saturated": False}
    return {"vllm_tune": {"run_id": RUN_ID, "kind": "capacity"},
            "capacity": {"variable": "rate", "slo_ms": {"ttft": slo}, "slo_percentile": 99.0, "capacity": cap,
                         "capacity_request_throughput": cap, "max_throughput": 12.0, "confidence": "x",
                         "knee": knee, "curve": [knee]}}


def test_capacity_searches_compare_by_capacity_within_search_resolution(tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", capacity(10.0))
    b = write(tmp_path, "b.json", capacity(13.0))
    c = write(tmp_path, "c.json", capacity(10.5))
    out = compare(a, b, c)
    assert out.runs[0].format == "vllm-tune-capacity"
    first, second = rows(out, 0), rows(out, 1)
    assert first["capacity value"].verdict == "better" and first["capacity value"].delta_pct == pytest.approx(30.0)
    assert second["capacity value"].verdict == "within-noise"  # 5 % is inside the search's 10 % resolution
    assert "comparison.capacity-resolution" in out.comparisons[0].knowledge_ids
    other_slo = write(tmp_path, "d.json", capacity(13.0, slo=800.0))
    assert check_ids(compare(a, other_slo))["capacity.slo_ms"] == "blocking"


def test_capacity_search_against_a_single_run_is_not_comparable(tmp_path: Path) -> None:
    out = compare(write(tmp_path, "a.json", capacity(10.0)), write(tmp_path, "b.json", make_result()))
    assert check_ids(out) == {"kind.capacity-vs-benchmark": "blocking"}
    assert out.comparisons[0].overall == "not-comparable" and out.comparisons[0].metrics == []


# ---------------------------------------------------------------- the server's view


def test_server_window_explains_a_queueing_regression(tmp_path: Path) -> None:
    calm = {"mean_waiting": 0.0, "server_mean_queue_time_ms": 0.5, "server_mean_ttft_ms": 12.0, "preemptions": 0,
            "max_kv_cache_usage": 0.4, "client_minus_server_mean_ttft_ms": 0.4}
    busy = {"mean_waiting": 6.0, "server_mean_queue_time_ms": 40.0, "server_mean_ttft_ms": 55.0, "preemptions": 12,
            "max_kv_cache_usage": 0.97, "client_minus_server_mean_ttft_ms": 0.5}
    out = compare(write(tmp_path, "a.json", make_result(server=calm)),
                  write(tmp_path, "b.json", make_result(server=busy, ttft_s=0.055)))
    c = out.comparisons[0]
    diff = {s.field: s for s in c.server}
    assert diff["server_mean_queue_time_ms"].delta == pytest.approx(39.5)
    why = {k for w in c.likely_why for k in w.knowledge_ids}
    assert {"triage.ttft-high-queue-growing", "triage.preemption-kv-thrash", "triage.kv-cache-near-full"} <= why
    assert "triage.ttft-high-queue-empty" not in why  # the TTFT rise is explained by queueing
    assert "benchmarking.server-vs-client-latency" not in why


def test_client_server_gap_with_an_empty_queue_points_at_the_api_server(tmp_path: Path) -> None:
    calm = {"mean_waiting": 0.0, "server_mean_queue_time_ms": 0.5, "server_mean_ttft_ms": 12.0,
            "client_minus_server_mean_ttft_ms": 0.4}
    starved = {**calm, "client_minus_server_mean_ttft_ms": 30.0}
    queued = {**starved, "mean_waiting": 6.0, "server_mean_queue_time_ms": 40.0}

    def why(cand: dict[str, float]) -> set[str]:
        out = compare(write(tmp_path, "a.json", make_result(server=calm)),
                      write(tmp_path, "b.json", make_result(server=cand, ttft_s=0.042)))
        return {k for w in out.comparisons[0].likely_why for k in w.knowledge_ids}

    assert {"benchmarking.server-vs-client-latency", "benchmarking.starved-api-server"} <= why(starved)
    # With requests waiting in vLLM's own queue the backlog is visible; the API server is not the suspect.
    queued_why = why(queued)
    assert "benchmarking.server-vs-client-latency" in queued_why
    assert "benchmarking.starved-api-server" not in queued_why


def test_every_cited_knowledge_id_exists(tmp_path: Path) -> None:
    kb = load_knowledge()
    limited = make_result(server={"preemptions": 3, "server_mean_itl_ms": 9.0, "prefix_cache_hit_rate": 0.1})
    limited["client_check"].update(client_limited=True, warmup_requests=0)
    outs = [
        compare(write(tmp_path, "a.json", make_result(server={"preemptions": 0, "server_mean_itl_ms": 5.0,
                                                              "prefix_cache_hit_rate": 0.6})),
                write(tmp_path, "b.json", limited), write(tmp_path, "c.json", make_result(out=9, failed=2, n=50))),
        compare(write(tmp_path, "d.json", capacity(1.0)), write(tmp_path, "e.json", capacity(2.0)),
                write(tmp_path, "f.json", make_result())),
    ]
    cited = {k for out in outs for k in out.knowledge_ids}
    cited |= {k for out in outs for c in out.comparisons for chk in c.checks for k in chk.knowledge_ids}
    assert len(cited) >= 10
    for entry_id in cited:
        assert kb.get(entry_id).id == entry_id


# ---------------------------------------------------------------- CLI and MCP


def test_cli_prints_a_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path, "a.json", make_result(ttft_s=0.010, seed=1))
    b = write(tmp_path, "b.json", make_result(ttft_s=0.013, seed=2))
    assert main(["compare", a, b]) == 0
    text = capsys.readouterr().out
    assert "run [1] vs baseline [0]: worse" in text
    assert "95% interval" in text and "ttft mean (ms)" in text
    assert main(["compare", a, b, "--json", "--metrics", "ttft", "--percentiles", "50"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["statistic"] for m in data["comparisons"][0]["metrics"]] == ["mean", "p50"]


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(SAMPLE), str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err and "Traceback" not in err
    assert main(["compare", str(SAMPLE)]) == 2
    assert "at least two runs" in capsys.readouterr().err
    assert main(["compare", str(SAMPLE), str(SAMPLE), "--baseline", "5"]) == 2
    assert "baseline index 5" in capsys.readouterr().err


@pytest.mark.anyio
async def test_mcp_tool_is_read_only_and_returns_structured_verdicts(tmp_path: Path) -> None:
    mcp: MCPServer[Any] = MCPServer(name="t")
    register(mcp)
    a = write(tmp_path, "a.json", make_result(ttft_s=0.010, seed=1))
    b = write(tmp_path, "b.json", make_result(ttft_s=0.013, seed=2))
    async with Client(mcp) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "compare_runs")
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False and tool.annotations.open_world_hint is False
        assert tool.input_schema["required"] == ["runs"]
        result = await client.call_tool("compare_runs", {"runs": [a, b]})
        assert not result.is_error and result.structured_content is not None
        assert result.structured_content["comparisons"][0]["overall"] == "worse"
        bad = await client.call_tool("compare_runs", {"runs": [a, str(tmp_path / "nope.json")]})
        assert bad.is_error and "no such file" in bad.content[0].text  # type: ignore[union-attr]


def test_faster_first_token_but_slower_decode_is_mixed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path, "a.json", make_result(ttft_s=0.010, itl_s=0.005, seed=1))
    b = write(tmp_path, "b.json", make_result(ttft_s=0.005, itl_s=0.008, seed=2))
    out = compare(a, b)
    r = rows(out)
    assert r["ttft p50"].verdict == "better" and r["e2el p50"].verdict == "worse"
    assert r["tpot mean"].verdict == "worse" and r["tpot mean"].basis == "bootstrap"  # output_lens are saved
    c = out.comparisons[0]
    assert c.overall == "mixed" and "regressed" in c.summary and "improved" in c.summary
    cap = [write(tmp_path, "c.json", capacity(10.0)), write(tmp_path, "d.json", capacity(14.0, knee_tp=11.0))]
    assert main(["compare", *cap]) == 0
    text = capsys.readouterr().out
    assert "capacity (req/s)" in text and "better*" in text and "vllm-tune-capacity" in text


def test_runs_from_different_load_generators_are_not_ranked(tmp_path: Path) -> None:
    ours = make_result(n=50)
    theirs = {k: v for k, v in ours.items() if k not in ("client_check", "provenance", "vllm_tune", "server")}
    for key in [k for k in theirs if k.endswith("_ttft_ms") and not k.startswith("std")]:
        theirs[key] = ours[key] * 2.4  # a CPU-starved other client would read this
    out = compare(write(tmp_path, "ours.json", ours), write(tmp_path, "vllm.json", theirs))
    c = out.comparisons[0]
    assert out.runs[1].format == "vllm-bench-serve"
    assert check_ids(out)["client.different"] == "blocking"
    assert c.overall == "not-comparable" and all(m.verdict == "not-comparable" for m in c.metrics)
    assert "different load generators" in c.summary
    text = render_text(out)
    # The reason comes before the numbers.
    assert text.index("different load generators") < text.index("ttft mean (ms)")


def test_flags_recorded_for_one_run_only_are_unknown_not_different(tmp_path: Path) -> None:
    a = write(tmp_path, "a.json", make_result(flags={"max-num-seqs": "128", "enable-prefix-caching": "true"}))
    b = write(tmp_path, "b.json", make_result(flags={"max-num-seqs": "128"}))
    out = compare(a, b)
    ids = check_ids(out)
    assert "server.flags" not in ids  # nothing recorded on both sides differs
    unknown = next(c for c in out.comparisons[0].checks if c.id == "server.flags-unknown")
    assert unknown.severity == "info" and "enable-prefix-caching" in unknown.message
    assert "None" not in render_text(out)


def test_descriptive_fields_of_another_type_do_not_break_a_comparison(tmp_path: Path) -> None:
    # Found by tests/security/test_fuzz_compare.py: a result whose "date" is a list.
    a = write(tmp_path, "a.json", make_result())
    b = write(tmp_path, "b.json", make_result(date=[], label={"x": 1}))
    out = compare(a, b)
    assert out.runs[1].date is None and out.runs[1].label is None
