"""What diagnose prints is held against what really happened on the real vLLM 0.32 CPU server.

- The cross-check: a known load from the project's own load generator (run_benchmark), diagnosed over the same
  window (the benchmark's own first and last /metrics scrape), agrees with the client's measurements: each
  percentile within the width of the histogram bucket that holds it (plus the client-side time the server
  cannot see, measured as the difference of the exact means), request and token counts and rates within 2%,
  and queue time bounded by the client's E2E latency minus the server-side running time.
- Overload (--max-num-seqs 4, 16 concurrent) is never "SLO met".
- The first window of a fresh server is reported as warm-up.
- A stated --window that contradicts the captures' timestamps is warned about and replaced.
The states are driven hard and the assertions are on what the machine's load cannot change.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from support import load
from support.tiny_models import TinyModels
from support.vllm_server import VllmFactory, VllmServer, start_vllm
from test_diagnose_vllm import diagnose, during, one_round_s, paced_overload_window, sized_overload, warm

from vllm_tune.cli.main import main
from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark
from vllm_tune.tools.diagnose.api import DiagnoseOutput
from vllm_tune.tools.slo import SloTargets

pytestmark = pytest.mark.integration

PROMPTS, CONCURRENCY, INPUT_LEN, OUTPUT_LEN = 32, 8, 32, 32


def _neighbours(values_ms: list[float], q: float) -> tuple[float, float]:
    """The two order statistics the client's percentile (linear interpolation, as numpy and vllm bench) lies
    between. The server's histogram quantile holds the value of rank q*n, one of the two."""
    xs = sorted(values_ms)
    idx = q / 100.0 * (len(xs) - 1)
    return xs[math.floor(idx)], xs[math.ceil(idx)]


def _within_bucket(client_ms: float, p: dict[str, Any], what: str, overhead_ms: float = 0.0,
                   lower_only: bool = False, values_ms: list[float] | None = None) -> None:
    """The client's value lies in the server's bucket, widened by one bucket width on each side, plus on the
    upper side twice the client-side time the server cannot see (`overhead_ms`, measured in the same window).
    `lower_only`: the client's value may lie anywhere above the bucket's widened lower edge.
    `values_ms`: the client's per-request values; then one of the two requests the client's percentile is
    interpolated between must lie in that range. With 2 seats under 8 requests the latencies split into requests
    that queued and requests that did not (beside stress-ng: 15 below 800 ms, 17 above 1400 ms), and the
    interpolated median falls in the empty stretch between them, while the server's bucket holds the 16th."""
    lower, upper = float(p["lower_ms"]), p["upper_ms"]
    lo, hi = (client_ms, client_ms) if values_ms is None else _neighbours(values_ms, float(p["q"]))
    if upper is None:  # above the last edge: only a lower bound
        assert hi >= lower, (what, client_ms, lo, hi, p)
        return
    width = float(upper) - lower
    if lower_only:
        assert hi >= lower - width, (what, client_ms, lo, hi, p)
        return
    assert hi >= lower - width and lo <= float(upper) + width + 2 * overhead_ms, \
        (what, client_ms, lo, hi, p, overhead_ms)


def test_diagnose_agrees_with_the_load_generator_on_the_same_window(vllm_server_factory: VllmFactory) -> None:
    # max_num_seqs 2 under 8 concurrent requests: most of each request's life is queueing, so the queue
    # comparison means something.
    server = vllm_server_factory(list(load.overload.server_args))
    out = asyncio.run(run_benchmark(RunBenchmarkInput(
        url=server.url, model=server.model, concurrency=CONCURRENCY, num_prompts=PROMPTS, input_len=INPUT_LEN,
        output_len=OUTPUT_LEN, percentiles=[50, 90], warmup_requests=2, seed=1,
        serve_flags={"max-num-seqs": "2"})))
    assert out.result is not None
    r = out.result.model_dump()
    assert r["completed"] == PROMPTS and r["failed"] == 0
    diagnosis = r["server"]["diagnosis"]
    assert diagnosis is not None, r["server"].get("notes")
    d = DiagnoseOutput.model_validate(diagnosis)
    lat = diagnosis["latency"]
    # What the client sees and the server does not (HTTP, tokenisation, a starved client reading its streams)
    # is, per metric, the difference of the two exact means over the same requests (the server's from
    # _sum/_count): a few ms on an idle machine, tens of ms beside a busy CPU. The server never sees more of
    # TTFT or E2E latency than the client does.
    # A starved client reads its streams in clumps: a stall, then several tokens at once, and the first token
    # reaches it later after the engine made it than the last, so its mean gap falls below the engine's (beside
    # stress-ng 2.0-2.8 ms against 4.8 ms). Its gaps are then not the engine's: a few long ones hold the clumps
    # (client p90 ITL 90 ms, the server's in its 10-25 ms bucket), so only the lower side of its ITL percentiles
    # is held to the server's. (run_benchmark's own client_limited flag is no guide: it is raised on an idle box.)
    starved = r["mean_itl_ms"] < 0.9 * lat["itl"]["mean_ms"]
    per_request = {"ttft": [1000.0 * x for x in r["ttfts"]], "e2el": [1000.0 * x for x in r["latencies"]]}
    for metric in ("ttft", "itl", "tpot", "e2el"):
        overhead = r[f"mean_{metric}_ms"] - lat[metric]["mean_ms"]
        if metric in ("ttft", "e2el"):
            assert overhead >= -5.0, (metric, r[f"mean_{metric}_ms"], lat[metric]["mean_ms"])
        for q in (50, 90):
            _within_bucket(r[f"p{q}_{metric}_ms"], lat[metric][f"p{q}"],
                           f"{metric} p{q}, means client {r[f'mean_{metric}_ms']:.1f} / server "
                           f"{lat[metric]['mean_ms']:.1f} ms, client clumped: {starved}", max(0.0, overhead),
                           lower_only=starved and metric == "itl", values_ms=per_request.get(metric))
    # Counts: every measured request ran between the benchmark's first and last scrape; warm-up ran before.
    finished = d.workload.finished_requests or 0
    assert abs(finished - PROMPTS) <= 0.02 * PROMPTS
    tokens = (d.workload.generation_tokens_per_s or 0) * (d.window_s or 0)
    assert tokens == pytest.approx(r["total_output_tokens"], rel=0.02)
    prompt_tokens = (d.workload.prompt_tokens_per_s or 0) * (d.window_s or 0)
    assert prompt_tokens == pytest.approx(r["total_input_tokens"], rel=0.02)
    # Rates: the server's window is the client's run plus the time of one scrape at each end.
    assert d.window_s is not None and d.window_s >= r["duration"] * 0.98
    assert d.workload.request_rate_per_s == pytest.approx(finished / d.window_s)
    if d.window_s <= r["duration"] * 1.02:
        assert d.workload.generation_tokens_per_s == pytest.approx(r["output_throughput"], rel=0.02)
    # Queue time: the client's mean E2E minus what the server spent running the request is the server's
    # queueing plus the client-side overhead (HTTP, tokenisation; it grows on a busy machine), so the queue
    # is at most that; and the server's queueing plus running time is at most its own E2E (which also holds
    # the API server's hand-off to the engine, tens of ms beside a busy CPU).
    assert d.latency.queue is not None and d.latency.inference is not None and d.latency.queue.mean_ms is not None
    assert d.latency.inference.mean_ms is not None and d.latency.e2el is not None
    assert d.latency.e2el.mean_ms is not None
    client_wait = r["mean_e2el_ms"] - d.latency.inference.mean_ms
    queue = d.latency.queue.mean_ms
    assert queue > 0.2 * d.latency.e2el.mean_ms, (queue, d.latency.e2el.mean_ms)  # the load really queued
    assert queue <= client_wait + 5.0, (queue, client_wait)
    parts = queue + d.latency.inference.mean_ms
    assert parts <= d.latency.e2el.mean_ms + 5.0, (queue, d.latency.inference.mean_ms, d.latency.e2el.mean_ms)
    assert d.workload.finished_requests == d.latency.queue.count


def test_overload_is_never_slo_met(vllm_server_factory: VllmFactory) -> None:
    # Issue 19's case: --max-num-seqs 4 under 16 concurrent requests. The window opens after two rounds of
    # four, so its requests queued for rounds, and the TTFT target is one round timed under the same load.
    # 16 concurrent, as many requests as keep the queue for about 14 s on this machine now. Beside a busy CPU
    # the client and the API server may hand requests to the engine barely faster than the seats drain them,
    # so the queue stays shorter than the two rounds (2 x seats waiting) that make every TTFT miss one round
    # (seen at 4 seats, and at 2 seats with 16 in flight: 0.7 waiting on average; with 80 sent at once the API
    # server took them in one by one as the seats freed, 0 waiting). The state is then set up again, once, on
    # 2 seats with outputs 4x longer, so each seat frees 4x less often than the API server must take a request in.
    for seats, max_tokens in ((4, 128), (2, 512)):
        server = vllm_server_factory(["--max-num-seqs", str(seats)])
        warm(server)
        round_s = one_round_s(server, max_tokens)
        sized = sized_overload(round_s, seats=seats, max_tokens=max_tokens)
        state = load.LoadState(f"overload{seats}", ("--max-num-seqs", str(seats)), sized.requests, max_tokens, 16,
                               16, f"16 on {seats} seats, {max_tokens} tokens out")
        # The load's own time limit outlasts the longest paced window and its retry on a slow machine.
        out = during(partial(load.drive_state, server.url, server.model, state, time_limit_s=240.0), 0.0,
                     partial(paced_overload_window, server, seats=seats, serve_flags={"max_num_seqs": seats}))
        waiting = out.signals.get("waiting_mean")
        if waiting is not None and (waiting.value or 0) >= 2 * seats:
            break
    assert out.signals["waiting_mean"].value >= 1, out.signals.get("waiting_mean")
    assert out.slo["ttft"].status in ("violated", "undecided")
    assert not out.verdict.startswith("healthy") and "SLO met" not in out.verdict
    assert out.bottleneck == "triage.ttft-high-queue-growing", out.verdict


def test_a_fresh_servers_first_window_is_warm_up(tiny_models: TinyModels, server_log_dir: Path) -> None:
    with start_vllm(tiny_models.llama, ["--max-num-seqs", "6"], log_dir=server_log_dir) as server:
        def work() -> load.LoadResult:
            time.sleep(0.5)  # the window's first scrape comes before the first request, on any machine
            return load.drive(server.url, server.model, requests=8, max_tokens=16, concurrency=1)

        # A 1 ms TTFT target is missed by any request: without the warm-up check this names prefill-bound.
        out = during(work, 0.0, lambda: diagnose(url=server.url, window_s=6, slo=SloTargets(ttft=1)))
    assert (out.workload.finished_requests or 0) >= 1
    assert out.warmup is not None and "had finished no request yet" in out.warmup
    assert out.verdict.startswith("warming up"), out.verdict
    assert out.bottleneck is None


def test_a_wrong_window_is_warned_about(vllm_server: VllmServer, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    warm(vllm_server)
    out_dir = tmp_path / "cap"
    work = lambda: load.drive(vllm_server.url, vllm_server.model, requests=12, max_tokens=16,  # noqa: E731
                              concurrency=2)
    rc = during(work, 0.2, lambda: main(["capture", vllm_server.url, "--window", "3", "--out", str(out_dir),
                                         "--json"]))
    assert rc == 0
    captured = json.loads(capsys.readouterr().out)
    meta = json.loads((out_dir / "capture.json").read_text())
    assert 2.9 <= captured["window_s"] == meta["window_s"] <= 6.0
    assert (out_dir / "before.prom").read_text().startswith("# vllm-tune capture: scraped_at=")
    files = ["--metrics-file", str(out_dir / "before.prom"), "--metrics-file", str(out_dir / "after.prom")]
    assert main(["diagnose", *files, "--window", "30", "--json"]) == 0
    got = DiagnoseOutput.model_validate_json(capsys.readouterr().out)
    assert got.window_s == pytest.approx(meta["window_s"], abs=0.01)
    assert any("stated window (30 s) contradicts the scrapes' own timestamps" in c for c in got.caveats)
    # Without --window the files' own timestamps give the window, and nothing is contradicted.
    assert main(["diagnose", *files, "--json"]) == 0
    plain = DiagnoseOutput.model_validate_json(capsys.readouterr().out)
    assert plain.window_s == got.window_s and not any("contradicts" in c for c in plain.caveats)
