"""Runner plumbing: the precise event loop, read timestamps, worker sizing, prompt cancellation and what a
stopped run keeps."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from vllm_tune.tools.bench.arrivals import rate_schedule
from vllm_tune.tools.bench.client import build_body
from vllm_tune.tools.bench.records import RecordLog, RequestRecord
from vllm_tune.tools.bench.runner import (
    CANCELLED,
    LoadPlan,
    Progress,
    RunOutcome,
    check_schedule,
    choose_workers,
    run_load,
)
from vllm_tune.tools.bench.transport import precise_loop


def test_precise_loop_never_wakes_a_timer_early() -> None:
    loop, _clock = precise_loop()
    lateness: list[float] = []

    async def main() -> None:
        for delay in (0.0002, 0.0007, 0.0013, 0.003):
            target = time.perf_counter() + delay
            await asyncio.sleep(delay)
            lateness.append(time.perf_counter() - target)

    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        runner.run(main())
    assert len(lateness) == 4 and min(lateness) >= 0.0


def test_reads_are_stamped_when_the_poll_returned() -> None:
    loop, clock = precise_loop()
    seen: list[tuple[float, float]] = []
    a, b = socket.socketpair()

    class Reader(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            seen.append((clock(), time.perf_counter()))

    async def main() -> float:
        await loop.connect_accepted_socket(Reader, a)
        sent = time.perf_counter()
        b.send(b"x")
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.001)
        return sent

    try:
        with asyncio.Runner(loop_factory=lambda: loop) as runner:
            sent = runner.run(main())
    finally:
        b.close()
    assert seen, "the reader got nothing"
    stamped, handled = seen[0]
    assert sent <= stamped <= handled


def _plan(rate: float, tokens: int, n: int = 600) -> LoadPlan:
    body = build_body("completions", "m", "hello", tokens, ignore_eos=True)
    return LoadPlan("http://127.0.0.1:9", "completions", [body] * n, rate_schedule(n, rate))


def test_worker_count_follows_rate_times_stream_length(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert choose_workers(_plan(50, 4), None) == 1
    assert choose_workers(_plan(600, 4), None) == 1  # short streams: one process holds hundreds per second
    assert choose_workers(_plan(600, 256), None) > choose_workers(_plan(600, 16), None) > 1
    assert choose_workers(_plan(2000, 256), None) == 8  # capped by the cores
    assert choose_workers(_plan(2000, 256), 3) == 3  # an explicit choice wins


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and never answers: every request stays in flight."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    conns: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not done.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        done.set()
        t.join()
        for c in conns:
            c.close()
        srv.close()


def silent_plan(port: int, n: int, rate: float) -> LoadPlan:
    """n Poisson-timed requests to a server that never answers: all of them stay in flight."""
    body = build_body("completions", "m", "hello", 4, ignore_eos=True)
    return LoadPlan(f"http://127.0.0.1:{port}", "completions", [body] * n, rate_schedule(n, rate), timeout_s=30.0)


@pytest.mark.anyio
async def test_cancelling_the_caller_aborts_the_load_thread(silent_server: int) -> None:
    plan = silent_plan(silent_server, 200, 50.0)
    progress = Progress(200)
    task = asyncio.create_task(run_load(plan, workers=1, stop=lambda: False, progress=progress))
    await asyncio.sleep(0.3)
    assert progress.sent >= 3
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1.0
    sent = progress.sent
    await asyncio.sleep(0.1)
    assert progress.sent == sent  # nothing goes out after the cancel


@pytest.mark.anyio
async def test_stopped_run_keeps_every_sent_request_in_plan_order(silent_server: int) -> None:
    plan = silent_plan(silent_server, 100, 40.0)
    progress = Progress(100)
    stopped = asyncio.Event()

    async def stop_soon() -> None:
        await asyncio.sleep(0.4)
        stopped.set()

    stopper = asyncio.create_task(stop_soon())
    outcome = await run_load(plan, workers=1, stop=stopped.is_set, progress=progress)
    await stopper
    log = outcome.records
    assert outcome.cancelled and 3 <= len(log) == progress.sent < 100
    assert [r.index for r in log] == list(range(len(log)))
    assert all(log.error(k) == CANCELLED and not log.success(k) for k in range(len(log)))
    check = check_schedule(outcome, plan)
    # The schedule check still has its inputs after a stop; how late sends were depends on the machine's load,
    # which this test does not control, so it asserts only that the lag was measured.
    assert check.achieved_send_rate is not None and check.p99_lag_ms >= 0.0


@pytest.mark.anyio
async def test_client_cpu_counts_the_load_thread_not_the_process() -> None:
    """CPU spent elsewhere in the same process (here a stub server burning 1 s of CPU) is not the client's."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    burned = threading.Event()
    burn_cpu: list[float] = []
    conns: list[socket.socket] = []

    def serve() -> None:
        conns.append(srv.accept()[0])  # the first request has arrived: the run is under way
        start = time.thread_time()
        while time.thread_time() - start < 1.0:
            pass
        burn_cpu.append(time.thread_time() - start)
        burned.set()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        plan = silent_plan(srv.getsockname()[1], 2000, 5.0)  # a 400 s schedule: only the stop ends the run
        outcome = await run_load(plan, workers=1, stop=burned.is_set, progress=Progress(2000))
    finally:
        t.join(timeout=60)
        for c in conns:
            c.close()
        srv.close()
    assert burn_cpu and burn_cpu[0] >= 1.0
    # The load thread sent a few requests at 5 req/s and waited: far below the second burned beside it (the
    # process-wide count this replaced read at least that second).
    assert 0.0 < outcome.client_cpu_s < 0.5, outcome.client_cpu_s
    assert not any("CPU" in r for r in check_schedule(outcome, plan).reasons)


def lagging(rate: float, lag_s: float, n: int = 200) -> tuple[RunOutcome, LoadPlan]:
    """An open-loop run whose every send left `lag_s` late (the schedule's rate kept)."""
    offsets = [k / rate for k in range(n)]
    log = RecordLog.of(RequestRecord(k, 100.0 + t, 100.0 + t + lag_s, success=True, latency=0.05)
                       for k, t in enumerate(offsets))
    plan = LoadPlan("http://127.0.0.1:1", "completions", [b"{}"] * n, offsets=offsets)
    return RunOutcome(log, offsets[-1] + 0.05, 100.0, False, "", 1, 0.01, n), plan


def test_schedule_lag_is_judged_against_the_gaps_it_shifts() -> None:
    # 15 ms late: a tenth of a 2 req/s schedule's 500 ms gaps is 50 ms, so not flagged; at 100 req/s the
    # 10 ms gaps are shifted by more than one whole gap, so flagged, with the 5 ms floor named.
    calm = check_schedule(*lagging(2.0, 0.015))
    assert not calm.client_limited and calm.p99_lag_ms == pytest.approx(15.0)
    busy = check_schedule(*lagging(100.0, 0.015))
    assert busy.client_limited and "> 5 ms:" in busy.reasons[0]
    # In between the limit is a tenth of the mean gap: 20 req/s -> 5 ms floor; 5 req/s -> 20 ms.
    assert check_schedule(*lagging(5.0, 0.025)).reasons[0].startswith("p99 schedule lag 25.0 ms > 20 ms, a tenth")
    assert not check_schedule(*lagging(5.0, 0.018)).client_limited
