"""diagnose_metrics against real vLLM 0.32 CPU servers driven into each load state, and via real Prometheus.

Targets: the CPU server is slow, so latency verdicts use either the default targets (TTFT 3 s at p90: the
overload and thrash states queue requests for many seconds) or an SLO set from what the state cannot avoid
(a 900-token prompt at a 16-token budget takes 57 engine steps to its first token, over 40 ms on any machine).
Assertions are on findings and on signals with wide margins, never on tight latency numbers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from support import load
from support.cpu_split import on_frontend_cores, split_cores
from support.prometheus import PrometheusServer, start_prometheus
from support.vllm_server import VllmFactory, VllmServer

from vllm_tune.tools.diagnose.api import DiagnoseInput, DiagnoseOutput, diagnose_metrics
from vllm_tune.tools.diagnose.models import ServeFlags, SloTargets

pytestmark = pytest.mark.integration


def diagnose(**kwargs: object) -> DiagnoseOutput:
    return asyncio.run(diagnose_metrics(DiagnoseInput.model_validate(kwargs)))


def during(work: Callable[[], object], lead_s: float, fn: Callable[[], DiagnoseOutput]) -> DiagnoseOutput:
    """Start `work` in a thread, wait `lead_s`, run `fn` while it runs, then wait for `work` to finish.

    A load whose requests failed (the load generator counts failures instead of raising) fails the test with
    its errors (beyond one in a hundred, see _load_failed), so an empty window is never mistaken for a
    diagnosis problem. A load cut off by its own time limit is not a failure: the window has already been
    observed by then (a busy machine drains a sized queue more slowly than the sizing measured)."""
    errors: list[BaseException] = []
    results: list[object] = []

    def run() -> None:
        try:
            results.append(work())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(lead_s)
    try:
        return fn()
    finally:
        thread.join(timeout=180)
        assert not errors, errors
        failed = [r for r in results if isinstance(r, load.LoadResult) and _load_failed(r)]
        assert not failed, failed


def _load_failed(r: load.LoadResult) -> bool:
    """More than one request in a hundred failed: the state the test set up may not have formed. Fewer is the
    busy host's, not the server's (beside stress-ng one connection in 220 was reset while the rest of the queue
    drained normally), and is printed rather than failed on."""
    bad = r.failed or sum(1 for e in r.errors if not e.startswith("time limit"))
    if bad and bad <= max(1, r.sent // 100):
        print(f"load: {bad} of {r.sent} requests failed ({r.errors[:2]}); tolerated as the host's")
        return False
    return bool(bad)


def warnings(out: DiagnoseOutput) -> list[str]:
    return [f.id for f in out.findings if f.severity != "info"]


def test_idle_server_yields_no_warning(vllm_server: VllmServer) -> None:
    out = diagnose(url=vllm_server.url, window_s=2, sample_interval_s=0.5)
    assert warnings(out) == []
    assert out.verdict.startswith("idle")
    assert out.server.version == "0.32.0" and out.server.models[0].max_model_len == 1024
    assert out.capacity.gauge_samples >= 4 and out.capacity.prefix_caching_enabled is True


def test_light_load_is_healthy(vllm_server: VllmServer) -> None:
    warm(vllm_server)  # a window holding a fresh server's first requests is reported as warm-up instead
    state = load.LoadState("steady_light_long", (), 60, 32, 16, 2, "steady light load for a whole window")
    slo = SloTargets(ttft=1000, itl=250)  # realistic for this CPU server, also on a busy 2-core machine
    out = during(lambda: load.drive_state(vllm_server.url, vllm_server.model, state), 0.5,
                 lambda: diagnose(url=vllm_server.url, window_s=8, slo=slo))
    assert (out.workload.finished_requests or 0) >= 3
    assert warnings(out) == [], [(f.id, f.evidence) for f in out.findings]
    assert out.verdict.startswith("healthy")
    assert out.slo["ttft"].status == "met"
    assert out.abstained == [], out.abstained  # nothing points to a problem, so no rule is "undecided"


def warm(server: VllmServer) -> None:
    """One short request first: a fresh server's first engine steps are slow (warm-up), and a window that
    falls inside them sees no step finish and reads as idle."""
    result = load.drive(server.url, server.model, requests=1, max_tokens=4)
    assert result.completed == 1, result.errors


def finished(url: str) -> float:
    return load.scrape(url).get("vllm:request_success_total", 0.0)


def _wait_finished(url: str, count: float) -> None:
    t0 = time.monotonic()
    while finished(url) < count:
        assert time.monotonic() - t0 < 150, "the overload load stopped finishing requests"
        time.sleep(0.05)


def one_round_s(server: VllmServer, max_tokens: int = 128) -> float:
    """How long one request of the overload's length takes alone: a round of the queue takes at least this."""
    result = load.drive(server.url, server.model, requests=1, max_tokens=max_tokens)
    assert result.completed == 1, result.errors
    return result.wall_s


def sized_overload(round_s: float, seats: int, span_s: float = 14.0, max_tokens: int = 128) -> load.LoadState:
    """All requests at once, enough of them that the queue lasts about `span_s` on this machine now (a fixed
    count drains in 4 s on an idle box and takes a minute on a loaded one)."""
    requests = max(40, min(256, round(span_s / max(round_s, 0.01)) * seats))
    return load.LoadState("overload_sized", (), requests, max_tokens, 16, requests, f"{requests} at once")


def paced_overload_window(server: VllmServer, min_window_s: float = 2.0, seats: int = 2,
                          **kwargs: object) -> DiagnoseOutput:
    """Diagnose an overload while its queue is deep, whatever the machine's speed: time two rounds of `seats`
    (max_num_seqs) requests under this very load (from the first request to finish to the one after two
    rounds more), then observe for about four such rounds (at least `min_window_s`), so many requests finish
    in the window and many still wait at its end. The TTFT target is one such round: a request reaching its
    first token in the window queued behind at least two, so every one misses it. A request measured alone
    beforehand (`one_round_s`, which sizes the load) is no measure of either on a busy machine: it swings with
    the load beside it."""
    base = finished(server.url)
    _wait_finished(server.url, base + 1)
    t0 = time.monotonic()
    _wait_finished(server.url, base + 1 + 2 * seats)
    round_here = (time.monotonic() - t0) / 2
    # Four rounds, however long: requests finish a round's seats at a time, so a window of two rounds can hold
    # two finishes (seen beside stress-ng: 14.3 s rounds of 2 seats in a 30 s window) and diagnose abstains.
    window = max(min_window_s, min(90.0, 4 * round_here))
    slo = {"ttft": max(1.0, round_here * 1000.0)}
    out = diagnose(url=server.url, window_s=window, **kwargs, slo=slo)
    if out.verdict.startswith("abstaining: too few requests finished"):
        # The machine slowed between timing the rounds and the window (seen beside stress-ng: 2 of 8 expected
        # requests finished in a 2.2 s window); the sized queue still lasts, so observe it once more, longer.
        window = min(120.0, max(6.0, 3 * window))
        out = diagnose(url=server.url, window_s=window, **kwargs, slo=slo)
    # Shown when a test fails: how the window was paced, and the server's own count around it.
    print(f"paced window: {base:.0f} finished before, round {round_here:.3f} s timed, {window:.1f} s window, "
          f"{finished(server.url):.0f} finished after")
    return out


def test_overload_top_finding_is_capacity_bound(vllm_server_factory: VllmFactory) -> None:
    server = vllm_server_factory(list(load.overload.server_args))
    warm(server)
    for _attempt in range(2):
        round_s = one_round_s(server)
        state = sized_overload(round_s, seats=2)
        out = during(lambda: load.drive_state(server.url, server.model, state), 0.0,  # noqa: B023
                     lambda: paced_overload_window(server, serve_flags={"max_num_seqs": 2}))
        # The state this test needs is load inside the window; when the machine's speed changed between sizing
        # the load and observing it, the window can miss the load entirely, or (CI, once: a 2 s window paced on
        # a 63 ms round, mean TTFT 11 s) see too little of it to name anything, or see its finished requests barely
        # queued in the engine and name the API server: set the state up again, once.
        if not out.verdict.startswith(("idle", "abstaining")) and out.bottleneck != "triage.ttft-high-outside-engine":
            break
    assert out.bottleneck == "triage.ttft-high-queue-growing", (out.verdict, out.sources_used, out.capacity,
                                                                out.caveats)
    # How deep the engine's queue is depends on how fast the client gets requests to it on a busy machine;
    # the rule fires at one waiting on average.
    assert out.signals["waiting_mean"].value >= 1
    # Not asserted: how close running stays to max_num_seqs. On two shared cores the API server feeding dozens
    # of streams can leave the engine short of work between steps, so running averages well below 2.
    assert out.slo["ttft"].status in ("violated", "undecided")  # the bucket may straddle; never met
    bench = next(s for s in out.next_steps if s.tool == "run_benchmark")
    assert bench.arguments["output_len"] == 128


def test_a_front_end_on_one_core_is_named_as_the_bottleneck(vllm_server_factory: VllmFactory) -> None:
    # The engine on a core of its own, the API server and this client on the other: 64 streams keep the API server
    # busy, and TTFT passes outside the engine's queue and prefill while nothing waits in the scheduler.
    split = split_cores()
    if split is None:
        pytest.skip("one CPU: the engine and the API server cannot be given cores of their own")
    server = vllm_server_factory(split=split)
    # Five log-probabilities a token: the API server detokenizes and serialises them for every token it streams
    # while the engine's work barely changes, which adds margin. Measured share outside the engine (windows after the
    # first wave): quietly 0.72-0.89 without them, 0.94 with them; beside stress-ng (this client starved, a few
    # streams in flight) 0.52-0.66 without, 0.54-0.77 with.
    state = replace(load.frontend_bound, requests=3 * load.frontend_bound.requests, logprobs=5)

    def after_first_wave() -> DiagnoseOutput:
        # The first wave of 64 is sent at once and queues behind several full prefill steps (no prefix hits on a
        # fresh server); queue and prefill times are recorded when a request finishes, so a window that opens
        # before that wave has finished reads its queueing (one opened 1 s into the load read 44 % of TTFT as queue;
        # the waves after the first, staggered by then, queue under 1 %).
        _wait_finished(server.url, before + state.concurrency)
        # A target every request misses when the front end is the bottleneck (prefill alone takes 3-5 ms here, and
        # TTFT is at least twice that when most of it passes outside the engine): what is judged is where the time
        # goes.
        return diagnose(url=server.url, window_s=5, slo=SloTargets(ttft=5))

    with on_frontend_cores(split):
        warm(server)
        for _attempt in range(2):
            before = finished(server.url)
            out = during(lambda: load.drive_state(server.url, server.model, state), 0.0, after_first_wave)
            # The state is many streams inside the window; a window that caught the load's end sees too few of
            # them: set it up again, once.
            share = out.signals.get("outside_engine_share_of_ttft")
            if share is not None and share.value >= 0.5:
                break
    signals = {k: (v.value, v.how) for k, v in out.signals.items()}
    print(signals)  # the assertion's message is cut short
    assert out.bottleneck == "triage.ttft-high-outside-engine", (out.verdict, signals)
    evidence = {e.signal: e.value for e in out.findings[0].evidence}
    assert evidence["outside_engine_share_of_ttft"] >= 0.5
    assert evidence["queue_share_of_e2el"] < 0.1
    assert "--api-server-count" in [a.target for a in out.findings[0].actions]


def test_kv_thrash_top_finding_is_preemption(vllm_server_factory: VllmFactory) -> None:
    server = vllm_server_factory(list(load.kv_thrash.server_args))
    warm(server)
    # Three times the state's requests: beside stress-ng the window's first scrape, queued behind 20 streams in a
    # starved API server, once came back after the whole load had run, and both windows read idle.
    thrash = replace(load.kv_thrash, requests=3 * load.kv_thrash.requests)
    for _attempt in range(2):
        out = during(lambda: load.drive_state(server.url, server.model, thrash), 1.5,
                     lambda: diagnose(url=server.url, window_s=20, serve_flags=ServeFlags(max_num_seqs=4)))
        # The state is preemptions inside the window; a starved client can deliver the load too late for it,
        # and then the state is set up again, once, before the diagnosis is judged.
        signal = out.signals.get("preemptions_per_s")
        if signal is not None and signal.value and signal.value > 0:
            break
    assert out.bottleneck == "triage.preemption-kv-thrash", out.verdict
    assert out.signals["preemptions_per_s"].value > 0.05
    # The gauge is scraped about once a second and a 400-token request holds its blocks for well under that, so
    # the scraped peak depends on the machine's speed (CI saw 5 of 9 blocks); the preemptions prove it filled.
    assert out.capacity.kv_usage_max is not None and out.capacity.kv_usage_max > 0
    assert out.signals["kv_usage_max"].value == 1.0
    assert out.capacity.kv_cache_size_tokens == 1280
    assert any(s.tool == "recommend_parallelism" for s in out.next_steps)


def test_long_prompts_with_tiny_budget_are_prefill_bound(vllm_server_factory: VllmFactory) -> None:
    server = vllm_server_factory(list(load.long_prompts.server_args))
    warm(server)
    # 20 requests one at a time: on a fast machine all of them fall in the window, on a slow one enough do.
    work = lambda: load.drive(server.url, server.model, requests=20, max_tokens=8, prompt_tokens=900,  # noqa: E731
                              concurrency=1)
    # A warm server needs 57 engine steps of 16 tokens for a 900-token prompt: at least about 1 ms each even on
    # an idle machine, so TTFT is over 40 ms for sure, while a 16-token prompt's first token takes one step.
    out = during(work, 0.3, lambda: diagnose(url=server.url, window_s=15, slo=SloTargets(ttft=40),
                                            serve_flags=ServeFlags(max_num_batched_tokens=16)))
    assert out.bottleneck == "triage.ttft-high-queue-empty", out.verdict
    assert out.signals["queue_time_share_of_ttft"].value < 0.5
    assert out.signals["prefill_steps_p90"].value >= 40  # a 900-token prompt at 16 tokens per step
    budget = next(a for a in out.findings[0].actions if a.target == "--max-num-batched-tokens")
    assert budget.value is not None and "now 16" in budget.value


def test_prometheus_path_matches_direct_scrape(vllm_server_factory: VllmFactory) -> None:
    server = vllm_server_factory(list(load.overload.server_args))
    with start_prometheus([server.url], scrape_interval_s=1) as prom:
        prom.wait_for_series("vllm:num_requests_running")
        time.sleep(2)
        flags = ServeFlags(max_num_seqs=2)
        # Enough requests that a 6 s window, long enough for PromQL's rate(), still sees the queue.
        for _attempt in range(2):  # set up again once if the window missed the load (see the overload test)
            round_s = one_round_s(server)
            deep = sized_overload(round_s, seats=2)
            direct = during(lambda: load.drive_state(server.url, server.model, deep), 0.0,  # noqa: B023
                            lambda: paced_overload_window(server, min_window_s=6.0,
                                                          serve_flags=flags))
            if direct.bottleneck == "triage.ttft-high-queue-growing":
                break
        assert direct.window_start_unix is not None and direct.window_end_unix is not None
        time.sleep(2.5)  # the last scrape of the window is in Prometheus
        via = diagnose(prometheus_url=prom.url, prometheus_end=direct.window_end_unix,
                       window_s=direct.window_end_unix - direct.window_start_unix, serve_flags=flags,
                       slo=direct.slo and {"ttft": direct.slo["ttft"].target_ms})
    assert via.bottleneck == direct.bottleneck == "triage.ttft-high-queue-growing", (
        direct.window_s, direct.workload, via.window_s, via.workload, via.caveats)
    # The stall rule reads the running average, which Prometheus's 1 s samples and the direct gauge samples see
    # differently right at the window's edge; every other warning must agree.
    edge = "triage.running-below-limit-stall"
    assert [w for w in warnings(via) if w != edge] == [w for w in warnings(direct) if w != edge]
    a, b = direct.workload.finished_requests or 0, via.workload.finished_requests or 0
    # Each end of the Prometheus window is dated by its sample's scrape time, which lags the direct scrape by a
    # scrape interval on a quiet box and by more when a busy one delays or fails scrapes: the counts may differ
    # by what finished in those shifts (plus half a second for each end's time to render /metrics).
    assert via.window_start_unix is not None and via.window_end_unix is not None
    shift_s = abs(via.window_start_unix - direct.window_start_unix) + abs(via.window_end_unix - direct.window_end_unix)
    lag = (direct.workload.request_rate_per_s or 0.0) * (shift_s + 1.0)
    assert abs(a - b) <= max(4.0, lag + 2), (a, b, lag, shift_s)
    assert via.server.engines == 1
    assert "ttft" in via.latency.promql_cross_check  # PromQL histogram_quantile answered for the same range


def test_prometheus_fixture_fleet_view(prometheus: PrometheusServer, vllm_server: VllmServer) -> None:
    prometheus.wait_for_series("vllm:e2e_request_latency_seconds_count")
    time.sleep(3)  # a few idle scrapes before the load, so the range starts on data
    load_start = time.time()
    load.drive_state(vllm_server.url, vllm_server.model, load.steady_light)
    time.sleep(2.5)
    via = diagnose(prometheus_url=prometheus.url, window_s=time.time() - load_start + 2.5,
                   prometheus_selector='job="vllm"')
    assert warnings(via) == []
    assert (via.workload.finished_requests or 0) >= load.steady_light.requests
    (engine,) = via.capacity.engines
    assert engine.labels["instance"] == f"127.0.0.1:{vllm_server.port}"
    ours = via.latency.ttft
    promql = via.latency.promql_cross_check.get("ttft")
    assert ours is not None and ours.p90 is not None and promql is not None
    if ours.p90.value_ms is not None:  # an interpolated value: PromQL's histogram_quantile gives the same
        assert abs(promql - ours.p90.value_ms) <= 0.05 * ours.p90.value_ms + 1.0
    else:  # a bound: PromQL interpolates (first bucket) or returns the last edge (+Inf); both within it
        assert ours.p90.lower_ms <= promql <= (ours.p90.upper_ms or promql)
