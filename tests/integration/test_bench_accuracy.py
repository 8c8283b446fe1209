"""run_benchmark against the deterministic streaming test server: accuracy, caps, cancel, auth, safety."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support_bench import StreamServer, start_stream_server

from vllm_tune.tools.bench.api import RunBenchmarkInput, check_target, run_benchmark
from vllm_tune.tools.errors import BadInputError, TargetError, TargetNotAllowedError
from vllm_tune.tools.net.targets import TargetPolicy

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

TTFT_MS, ITL_MS = 50.0, 10.0


@pytest.fixture(scope="module")
def server() -> Iterator[StreamServer]:
    with start_stream_server(TTFT_MS, ITL_MS) as srv:
        yield srv


def bench(srv: StreamServer, tmp: Path, **kw: object) -> RunBenchmarkInput:
    args: dict[str, object] = {"url": srv.url, "input_len": 24, "output_len": 12, "save_result": str(tmp),
                               "warmup_requests": 1}
    args.update(kw)
    return RunBenchmarkInput.model_validate(args)


@contextmanager
def wakeup_lateness() -> Iterator[list[float]]:
    """How late a thread of this process wakes from a 2 ms sleep, in ms, sampled for as long as the block runs.

    The load thread wakes the same way to read each response; on a busy host both are late alike."""
    late: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            t = time.perf_counter()
            time.sleep(0.002)
            late.append(max(0.0, (time.perf_counter() - t - 0.002) * 1000))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield late
    finally:
        done.set()
        thread.join()


async def test_measured_latencies_match_injected_delays(server: StreamServer, tmp_path: Path) -> None:
    before = server.stats()
    with wakeup_lateness() as late:
        out = await run_benchmark(bench(server, tmp_path, concurrency=4, num_prompts=60))
    after = server.stats()
    assert out.result is not None
    r = out.result.model_dump()
    # The server reports how late its own event loop emitted; the client should add at most a few ms. The server
    # starts its clock when its loop reads the request and the client stops it when its loop reads the first
    # token: two wake-ups that no stamp covers, each about as late as the server's timers (first_lag) and this
    # process's threads (sampled during the same run), which a busy host stretches (measured at the same moment,
    # so the bound follows the load instead of assuming an idle box).
    first_lag = after["first_emit_lag_ms"]
    token_lag = after["token_emit_lag_ms"]
    client_late = sum(late) / len(late)
    wakeups = first_lag + client_late
    assert r["completed"] == 60 and r["failed"] == 0
    assert TTFT_MS + first_lag - 0.5 <= r["mean_ttft_ms"] <= TTFT_MS + first_lag + wakeups + 3.0, \
        f"server lag {first_lag:.2f} ms, client wake-up lateness {client_late:.2f} ms"
    assert abs(r["mean_itl_ms"] - ITL_MS) <= 1.0 + token_lag
    assert abs(r["mean_tpot_ms"] - ITL_MS) <= 1.0 + token_lag
    assert TTFT_MS + 11 * ITL_MS - 6.0 <= r["mean_e2el_ms"] <= TTFT_MS + 11 * ITL_MS + 6.0 + wakeups + token_lag
    assert r["total_output_tokens"] == 60 * 12
    assert r["total_input_tokens"] == 60 * 24  # exact lengths, counted by the server's usage block
    assert after["requests"] - before["requests"] == 61  # 60 measured + 1 warm-up
    check = r["client_check"]
    assert check["exact_input_lengths"] is True and check["input_length_mismatches"] == 0
    assert check["warmup_requests"] == 1
    server_block = r["server"]
    assert server_block["scrapes"] >= 2 and server_block["max_running"] >= 1
    assert server_block["server_mean_ttft_ms"] == pytest.approx(TTFT_MS, abs=3.0)
    saved = json.loads(Path(out.result_path or "").read_text())
    assert saved["mean_ttft_ms"] == r["mean_ttft_ms"] and saved["provenance"]["model"] == "test-model"


async def test_poisson_rate_keeps_schedule_and_reports_lag(server: StreamServer, tmp_path: Path) -> None:
    out = await run_benchmark(bench(server, tmp_path, rate=40.0, num_prompts=120, seed=7))
    assert out.result is not None
    r = out.result.model_dump()
    check = r["client_check"]
    assert r["completed"] == 120
    assert r["request_rate"] == 40.0 and r["burstiness"] == 1.0
    # How late the client sent depends on what else the machine runs; what cannot depend on it is that the run
    # reports the lag it had and calls itself client-limited exactly when that lag breaks the 5 ms limit.
    assert 0.0 <= check["p50_lag_ms"] <= check["p99_lag_ms"] <= check["max_lag_ms"]
    late = check["p99_lag_ms"] > 5.0
    assert late == any("schedule lag" in reason for reason in check["reasons"])
    if not check["client_limited"]:
        assert check["achieved_send_rate"] == pytest.approx(check["target_rate"], rel=0.05)


async def test_chat_endpoint_skips_role_delta(server: StreamServer, tmp_path: Path) -> None:
    out = await run_benchmark(bench(server, tmp_path, endpoint="chat", concurrency=2, num_prompts=10))
    assert out.result is not None
    r = out.result.model_dump()
    assert r["completed"] == 10 and r["backend"] == "openai-chat"
    assert r["mean_ttft_ms"] >= TTFT_MS  # the role-only delta is sent with the first token, not before it
    assert r["total_input_tokens"] == 10 * 24  # exact length includes the chat template


async def test_goodput_counts_requests_meeting_slo(server: StreamServer, tmp_path: Path) -> None:
    good = await run_benchmark(bench(server, tmp_path, concurrency=2, num_prompts=10, slo={"ttft": 500}))
    bad = await run_benchmark(bench(server, tmp_path, concurrency=2, num_prompts=10, slo={"ttft": 20}))
    assert good.result is not None and bad.result is not None
    assert good.result.request_goodput == pytest.approx(good.result.request_throughput)
    assert bad.result.request_goodput == 0.0


async def test_cancel_returns_partial_results_promptly(server: StreamServer, tmp_path: Path) -> None:
    # Cancel about 1 s into the measured load (progress reports start with it; prompt building comes first).
    stop_at = [float("inf")]

    async def report(done: float, total: float | None, message: str) -> None:
        if stop_at[0] == float("inf"):
            stop_at[0] = time.monotonic() + 0.5

    out = await run_benchmark(bench(server, tmp_path, rate=20.0, num_prompts=400, output_len=50), report=report,
                              stop=lambda: time.monotonic() >= stop_at[0])
    elapsed = time.monotonic() - stop_at[0]
    assert out.state == "cancelled"
    assert out.result is not None
    r = out.result.model_dump()
    assert 3 <= r["completed"] < 40  # about 1 s of 20 req/s, minus the ones cut off in flight
    assert r["client_check"]["stop_reason"] == "cancelled"
    assert r["client_check"]["not_sent"] > 300
    assert r["client_check"]["cancelled_in_flight"] >= 1  # 600 ms streams at 20 req/s: some were in flight
    assert elapsed < 1.5  # prompt: no waiting for streams in flight nor for the rest of the schedule
    assert any("cancelled" in w for w in out.warnings)


async def test_duration_cap_stops_sending(server: StreamServer, tmp_path: Path) -> None:
    started = time.monotonic()
    out = await run_benchmark(bench(server, tmp_path, rate=30.0, duration_s=1.0, warmup_requests=0))
    assert out.result is not None
    r = out.result.model_dump()
    assert 15 <= r["completed"] <= 50
    assert r["client_check"]["stop_reason"] == "duration"
    assert time.monotonic() - started < 8.0


def test_caps_are_enforced() -> None:
    with pytest.raises(ValueError):
        RunBenchmarkInput(url="http://127.0.0.1:1", concurrency=5000)
    with pytest.raises(ValueError):
        RunBenchmarkInput(url="http://127.0.0.1:1", rate=5, num_prompts=10_001)
    with pytest.raises(ValueError):
        RunBenchmarkInput(url="http://127.0.0.1:1", rate=5, duration_s=3600)
    with pytest.raises(ValueError, match="one load shape"):
        RunBenchmarkInput(url="http://127.0.0.1:1", rate=5, concurrency=2)
    with pytest.raises(ValueError, match="itl"):
        RunBenchmarkInput(url="http://127.0.0.1:1", rate=5, slo={"itl": 10})


def test_non_loopback_needs_allowance_and_confirmation() -> None:
    req = RunBenchmarkInput(url="http://10.9.8.7:8000", rate=1)
    with pytest.raises(TargetNotAllowedError):
        check_target(req, TargetPolicy.of([]))
    allowed = TargetPolicy.of(["10.9.8.0/24"])
    with pytest.raises(BadInputError, match="confirm"):
        check_target(req, allowed)
    assert check_target(req.model_copy(update={"confirm": True}), allowed) == "http://10.9.8.7:8000"


async def test_non_loopback_refused_before_any_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_TUNE_ALLOWED_TARGETS", "10.9.8.7")
    with pytest.raises(BadInputError, match="confirm"):
        await run_benchmark(RunBenchmarkInput(url="http://10.9.8.7:8000", rate=1, save_result=str(tmp_path)))
    assert not any(tmp_path.iterdir())


async def test_api_key_sent_as_bearer_and_never_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-test-SECRET-4242"
    for name in ("VLLM_TUNE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with start_stream_server(5, 1, api_key=key) as srv:
        monkeypatch.setenv("VLLM_API_KEY", key)
        out = await run_benchmark(bench(srv, tmp_path, concurrency=2, num_prompts=6))
        stats = srv.stats()
        assert out.result is not None and out.result.completed == 6
        assert stats["auth_ok"] == 7 and stats["auth_bad"] == 0
        monkeypatch.setenv("VLLM_API_KEY", "wrong-key-123456")
        refused = await run_benchmark(bench(srv, tmp_path, concurrency=1, num_prompts=2, warmup_requests=0))
        assert refused.result is not None and refused.result.failed == 2
        assert "HTTP 401" in " ".join(refused.result.model_dump()["client_check"]["errors"])
    for path in tmp_path.rglob("*.json"):
        text = path.read_text()
        assert key not in text and "wrong-key-123456" not in text


async def test_unreachable_target_is_one_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TargetError, match="cannot reach"):
        await run_benchmark(RunBenchmarkInput(url=f"http://127.0.0.1:{port}", rate=1, save_result=str(tmp_path)))


async def test_multiprocess_workers_give_the_same_numbers(server: StreamServer, tmp_path: Path) -> None:
    out = await run_benchmark(bench(server, tmp_path, rate=40.0, num_prompts=80, workers=2))
    assert out.result is not None
    r = out.result.model_dump()
    assert r["completed"] == 80 and r["client_check"]["workers"] == 2
    assert TTFT_MS - 0.5 <= r["mean_ttft_ms"] <= TTFT_MS + 5.0
    assert abs(r["mean_itl_ms"] - ITL_MS) <= 2.0


async def test_capacity_search_finds_a_bounded_answer(tmp_path: Path) -> None:
    with start_stream_server(20, 2) as srv:
        out = await run_benchmark(RunBenchmarkInput(
            url=srv.url, input_len=8, output_len=4, save_result=str(tmp_path), search_capacity=True,
            slo={"ttft": 1000}, search_prompts=30, search_max=40.0, warmup_requests=0))
    cap = out.capacity
    assert cap is not None
    # Any rate up to 40 req/s meets a 1 s TTFT on this server: the answer is the upper bound.
    assert cap.capacity == 40.0 and cap.lowest_failing is None
    assert cap.passes_at_capacity == "2/2"
    assert cap.knee is not None and len(cap.curve) >= 3


def test_asyncio_loop_is_released() -> None:
    # No background tasks survive a run (each test above ran its own loop to completion).
    assert not asyncio.all_tasks(asyncio.new_event_loop())
