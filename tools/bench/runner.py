"""Drive load: open loop (a precomputed send schedule) or closed loop (fixed concurrency).

The runner keeps the measurement honest about itself: every request records when the schedule
wanted it sent and when it really went out, so a run where the client fell behind (schedule lag, CPU
saturation) is flagged instead of being reported as the server's latency. When one process cannot
keep up with the schedule the load is spread over worker processes that share one monotonic clock
(perf_counter is CLOCK_MONOTONIC on Linux, system-wide). Cancellation stops sending at once, aborts
requests in flight and keeps every finished request.

Each share of the load runs on its own event loop built on transport.PreciseSelector (sub-millisecond
timers, reads stamped at poll time): a worker process's main loop, or, for one process, a thread next
to the caller's loop, so the caller's own work (progress reports, /metrics scrapes) never sits between
a scheduled send and the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from vllm_tune.tools.bench.client import ENDPOINT_PATHS
from vllm_tune.tools.bench.metrics import percentile
from vllm_tune.tools.bench.records import RecordLog, RequestRecord
from vllm_tune.tools.bench.transport import Clock, StreamingPool, precise_loop
from vllm_tune.tools.net.http import SecretRedactor
from vllm_tune.tools.net.targets import TargetPolicy

CANCELLED = "cancelled"
# Client CPU per request, measured with bench/bench_loadgen.py on the 2-core box: ~0.15 ms fixed (task,
# write, record) plus ~0.05 ms per token event that arrives in its own read. An open-loop share is
# sized to use at most PROCESS_CPU_SHARE of a core: busier loops stamp arrivals late, and an extra
# process costs an interpreter start and competes with a server on the same box (measured: on 2 cores
# one process matched or beat two at 600 and 1,000 req/s, in p99 lag, and used half the CPU).
REQUEST_CPU_S = 150e-6
EVENT_CPU_S = 50e-6
PROCESS_CPU_SHARE = 0.5
CONCURRENCY_PER_PROCESS = 256


@dataclass
class LoadPlan:
    base_url: str
    endpoint: Literal["completions", "chat"]
    bodies: list[bytes]
    offsets: list[float] | None = None  # open loop when set
    concurrency: int | None = None  # closed loop size, or the in-flight cap of an open loop
    duration_s: float | None = None  # stop sending after this long
    timeout_s: float = 600.0
    grace_s: float = 30.0  # after the send window, how long requests in flight may finish
    api_key: str | None = field(default=None, repr=False)
    policy: TargetPolicy | None = None  # the targets the load may reach (default: the environment's)

    @property
    def open_loop(self) -> bool:
        return self.offsets is not None

    def pool_size(self, share: int) -> int:
        if self.concurrency:
            return max(1, min(self.concurrency, share))
        return max(1, min(share, 1024))


@dataclass
class RunOutcome:
    records: RecordLog
    duration: float
    started_at: float
    cancelled: bool
    stop_reason: str
    workers: int
    client_cpu_s: float
    sent: int


class Progress:
    """Counters the caller can poll while a run is in flight."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self.sent = 0


class _Sender:
    """One process's share of a plan: its connection pool, prepared requests and records."""

    def __init__(self, plan: LoadPlan, indices: list[int], t0: float, stop: Callable[[], bool], progress: Progress,
                 concurrency: int | None, clock: Clock) -> None:
        self.plan, self.indices, self.t0, self.stop, self.progress = plan, indices, t0, stop, progress
        self.concurrency = concurrency
        self.chat = plan.endpoint == "chat"
        self.records = RecordLog()
        self.in_flight: dict[int, RequestRecord] = {}
        self.deadline = t0 + plan.duration_s if plan.duration_s else math.inf
        self.reason = "completed"
        self.tasks: set[asyncio.Task[None]] = set()
        redact = SecretRedactor([plan.api_key] if plan.api_key else None)
        self.pool = StreamingPool(plan.base_url, max_connections=concurrency or plan.pool_size(len(indices)),
                                  timeout_s=plan.timeout_s, api_key=plan.api_key, redact=redact, clock=clock,
                                  policy=plan.policy)
        self.path = ENDPOINT_PATHS[plan.endpoint]
        self._last_body: bytes | None = None
        self._last_wire = b""

    def wire(self, i: int) -> bytes:
        """Request i on the wire. Built one at a time (open loop: before waiting for its send time) so that a
        long run holds no copy of every request; consecutive requests sharing one body share one copy."""
        body = self.plan.bodies[i]
        if body is not self._last_body:
            self._last_body, self._last_wire = body, self.pool.request_bytes(self.path, body)
        return self._last_wire

    async def one(self, rec: RequestRecord, data: bytes) -> None:
        try:
            await self.pool.send(data, rec, chat=self.chat)
        except asyncio.CancelledError:
            rec.success = False
            rec.error = CANCELLED
            raise
        finally:
            self.progress.done += 1
            if not rec.success:
                self.progress.failed += 1
            self.records.add(self.in_flight.pop(rec.index))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _new_record(self, i: int, intended: float) -> RequestRecord:
        rec = RequestRecord(index=i, intended_send=intended)
        self.in_flight[i] = rec
        self.progress.sent += 1
        return rec

    async def _wait_until(self, target: float) -> None:
        delay = target - time.perf_counter()
        while delay > 0:  # sliced so that a cancel is seen within 0.1 s even between sparse sends
            await asyncio.sleep(min(delay, 0.1))
            if self.stop():
                return
            delay = target - time.perf_counter()

    async def open_loop(self) -> None:
        assert self.plan.offsets is not None
        sem = asyncio.Semaphore(self.concurrency) if self.concurrency else None

        async def capped(rec: RequestRecord, data: bytes) -> None:
            assert sem is not None
            async with sem:
                await self.one(rec, data)

        for i in self.indices:
            target = self.t0 + self.plan.offsets[i]
            if target >= self.deadline:
                self.reason = "duration"
                break
            data = self.wire(i)
            await self._wait_until(target)
            if self.stop():
                self.reason = CANCELLED
                break
            rec = self._new_record(i, target)
            self._spawn(capped(rec, data) if sem else self.one(rec, data))

    async def closed_loop(self) -> None:
        cursor = iter(self.indices)

        async def user() -> None:
            for i in cursor:
                now = time.perf_counter()
                if now >= self.deadline or self.stop():
                    self.reason = "duration" if now >= self.deadline else CANCELLED
                    return
                await self.one(self._new_record(i, now), self.wire(i))

        await self._wait_until(self.t0)
        for _ in range(self.concurrency or 1):
            self._spawn(user())


async def _drive(plan: LoadPlan, indices: list[int], t0: float, stop: Callable[[], bool],
                 progress: Progress, concurrency: int | None,
                 clock: Clock = time.perf_counter) -> tuple[RecordLog, str]:
    """Send this process's share of the plan; returns its records (in plan order) and why sending stopped."""
    sender = _Sender(plan, indices, t0, stop, progress, concurrency, clock)
    try:
        if plan.open_loop:
            await sender.open_loop()
        else:
            await sender.closed_loop()
        await _settle(sender.tasks, stop, plan, sender.deadline)
        if stop():
            sender.reason = CANCELLED
    finally:
        sender.pool.close()
        for rec in sender.in_flight.values():  # tasks cancelled before they ever ran
            rec.error = rec.error or CANCELLED
            sender.records.add(rec)
        sender.in_flight.clear()
    return sender.records.sorted_by_index(), sender.reason


async def _settle(tasks: set[asyncio.Task[None]], stop: Callable[[], bool], plan: LoadPlan, deadline: float) -> None:
    """Wait for requests in flight; abort them on cancel or once the grace period after the window ends."""
    hard_end = deadline + plan.grace_s if math.isfinite(deadline) else math.inf
    while tasks:
        if stop() or time.perf_counter() >= hard_end:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return
        await asyncio.sleep(0.02)


def _worker_entry(plan: LoadPlan, indices: list[int], concurrency: int | None, ready: Any, start: Any,
                  stop_event: Any, results: Any, worker_id: int) -> None:
    """Body of one load-generating worker process."""
    # The parent alone decides when to stop (stop_event), so that a SIGINT/SIGTERM sent to the whole process
    # group still ends in a saved partial result; a parent that died stops the load too.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    parent = os.getppid()

    def halted() -> bool:
        return bool(stop_event.is_set()) or os.getppid() != parent

    gc.freeze()  # long-lived objects from the parent; fewer collection pauses during the run
    progress = Progress(len(indices))
    ready.put(worker_id)
    t0 = float(start.get())
    cpu0 = time.process_time()  # the load's own CPU, not the interpreter's start-up and imports

    async def report() -> None:
        last = (0, 0)
        while True:
            await asyncio.sleep(0.25)
            now = (progress.done, progress.failed)
            if now != last:
                results.put(("progress", worker_id, now[0] - last[0], now[1] - last[1]))
                last = now

    loop, clock = precise_loop()

    async def main() -> tuple[RecordLog, str]:
        reporter = asyncio.create_task(report())
        try:
            return await _drive(plan, indices, t0, halted, progress, concurrency, clock)
        finally:
            reporter.cancel()

    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        records, reason = runner.run(main())
    results.put(("progress", worker_id, 0, 0))
    results.put(("done", worker_id, records.payload(), reason, time.process_time() - cpu0))


def _tokens_per_request(plan: LoadPlan, default: int = 128) -> int:
    """The output length the first request asks for (every body of a plan is built alike)."""
    try:
        body = json.loads(plan.bodies[0]) if plan.bodies else {}
        return int(body.get("max_tokens") or body.get("max_completion_tokens") or default)
    except (ValueError, TypeError, AttributeError):
        return default


def choose_workers(plan: LoadPlan, requested: int | None) -> int:
    cpus = os.cpu_count() or 1
    if requested:
        return max(1, min(requested, 64))
    if plan.open_loop:
        assert plan.offsets is not None
        span = plan.offsets[-1] if plan.offsets else 0.0
        rate = len(plan.offsets) / span if span > 0 else 0.0
        cpu = rate * (REQUEST_CPU_S + EVENT_CPU_S * _tokens_per_request(plan))
        return max(1, min(cpus, math.ceil(cpu / PROCESS_CPU_SHARE)))
    return max(1, min(cpus, math.ceil((plan.concurrency or 1) / CONCURRENCY_PER_PROCESS)))


async def run_load(plan: LoadPlan, *, workers: int, stop: Callable[[], bool], progress: Progress,
                   start_delay_s: float = 0.02) -> RunOutcome:
    """Run the plan in this process (workers=1) or spread over `workers` processes."""
    n = len(plan.bodies)
    if workers <= 1:
        t0 = time.perf_counter() + start_delay_s
        records, reason, cpu_s = await _drive_in_thread(plan, list(range(n)), t0, stop, progress)
        end = time.perf_counter()
        return RunOutcome(records, max(0.0, end - t0), t0, reason == CANCELLED, reason, 1, cpu_s, len(records))
    return await _run_multiprocess(plan, workers, stop, progress)


async def _drive_in_thread(plan: LoadPlan, indices: list[int], t0: float, stop: Callable[[], bool],
                           progress: Progress) -> tuple[RecordLog, str, float]:
    """_drive on a precise loop in a thread of its own; cancelling the caller aborts the load promptly.

    Also returns the CPU seconds of that thread alone: the process's own usage would count whatever else runs
    in it (an MCP server, a test's stub server) and children reaped meanwhile (a vLLM server stopped by a
    caller), and call the client CPU-bound when it was not."""
    abort = threading.Event()

    def halted() -> bool:
        return abort.is_set() or stop()

    def body() -> tuple[RecordLog, str, float]:
        cpu0 = time.thread_time()
        loop, clock = precise_loop()
        with asyncio.Runner(loop_factory=lambda: loop) as runner:
            records, reason = runner.run(_drive(plan, indices, t0, halted, progress, plan.concurrency, clock))
        return records, reason, time.thread_time() - cpu0

    done = asyncio.get_running_loop().run_in_executor(None, body)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        abort.set()  # the thread cancels its requests in flight within one settle tick
        with contextlib.suppress(Exception):
            await done
        raise


def _split_concurrency(total: int | None, workers: int) -> list[int | None]:
    if not total:
        return [None] * workers
    return [total // workers + (1 if w < total % workers else 0) for w in range(workers)]


async def _run_multiprocess(plan: LoadPlan, workers: int, stop: Callable[[], bool],
                            progress: Progress) -> RunOutcome:
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    starts = [ctx.Queue() for _ in range(workers)]
    stop_event = ctx.Event()
    shares = _split_concurrency(plan.concurrency, workers)
    workers = sum(1 for s in shares if s is None or s > 0)
    procs = []
    for w in range(workers):
        indices = list(range(w, len(plan.bodies), workers))
        proc = ctx.Process(target=_worker_entry, args=(plan, indices, shares[w], ready, starts[w], stop_event,
                                                       results, w), daemon=True)
        proc.start()
        procs.append(proc)
    try:
        for _ in range(workers):
            await asyncio.to_thread(ready.get, True, 120)
        t0 = time.perf_counter() + 0.05
        for q in starts:
            q.put(t0)
        records = RecordLog()
        reasons: list[str] = []
        cpu_s = 0.0  # what the workers report of their own run, not RUSAGE_CHILDREN (any reaped child counts there)
        finished = 0
        while finished < workers:
            if stop():
                stop_event.set()
            try:
                msg = await asyncio.to_thread(results.get, True, 0.2)
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs) and results.empty():
                    raise RuntimeError("a load worker process exited without results") from None
                continue
            if msg[0] == "progress":
                progress.done += msg[2]
                progress.failed += msg[3]
                progress.sent = progress.done
            else:
                records.extend(RecordLog.from_payload(msg[2]))
                reasons.append(msg[3])
                cpu_s += float(msg[4])
                finished += 1
        end = time.perf_counter()
    finally:
        stop_event.set()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()  # workers ignore SIGTERM (see _worker_entry)
                proc.join(timeout=5)
    records = records.sorted_by_index()
    cancelled = CANCELLED in reasons
    reason = CANCELLED if cancelled else ("duration" if "duration" in reasons else "completed")
    last_done = max((records.start[k] + records.latency[k] for k in records.ok_rows()), default=end)
    duration = max(0.0, min(end, last_done + 0.01) - t0) if records else 0.0
    return RunOutcome(records, duration, t0, cancelled, reason, workers, cpu_s, len(records))


@dataclass
class ScheduleCheck:
    """How well the client kept its own schedule."""

    p50_lag_ms: float
    p99_lag_ms: float
    max_lag_ms: float
    target_rate: float | None
    achieved_send_rate: float | None
    client_cpu_s: float
    client_cpu_per_1k_requests_s: float
    client_limited: bool
    reasons: list[str]


def check_schedule(outcome: RunOutcome, plan: LoadPlan, *, lag_limit_ms: float = 5.0) -> ScheduleCheck:
    log = outcome.records
    sent = [k for k in range(len(log)) if log.start[k] > 0]
    lags = sorted(max(0.0, log.start[k] - log.intended[k]) * 1000.0 for k in sent)
    reasons: list[str] = []
    target = achieved = None
    if plan.open_loop and plan.offsets and len(sent) > 1:
        window = plan.offsets[len(sent) - 1] - plan.offsets[0]
        target = (len(sent) - 1) / window if window > 0 else None
        span = max(log.start[k] for k in sent) - min(log.start[k] for k in sent)
        achieved = (len(sent) - 1) / span if span > 0 else None
    p99 = percentile(lags, 99.0)
    capped = bool(plan.open_loop and plan.concurrency)
    # A late send matters as a share of the gaps it shifts: 15 ms late is a distorted schedule at 100 req/s
    # and noise at 2 req/s (a client sharing a busy host with the server lags that much at any rate), while
    # the achieved-rate check below still catches a client that cannot keep up at all.
    limit = max(lag_limit_ms, 100.0 / target) if target else lag_limit_ms
    if plan.open_loop and not capped and p99 > limit:
        why = f"{lag_limit_ms:.0f} ms" if limit == lag_limit_ms else f"{limit:.0f} ms, a tenth of the mean send gap"
        reasons.append(f"p99 schedule lag {p99:.1f} ms > {why}: the client sent late, so latencies "
                       "include client delay; use more worker processes or a lower rate")
    if target and achieved and not capped and achieved < 0.98 * target:
        reasons.append(f"the client sent {achieved:.1f} req/s of the {target:.1f} req/s scheduled")
    wall = max(outcome.duration, 1e-9)
    cores = min(outcome.workers, os.cpu_count() or 1)
    if outcome.client_cpu_s / wall > 0.9 * cores:
        reasons.append(f"the client used {outcome.client_cpu_s / wall:.2f} CPU cores of {cores} it may use: "
                       "it was CPU-bound")
    return ScheduleCheck(
        p50_lag_ms=percentile(lags, 50.0), p99_lag_ms=p99, max_lag_ms=lags[-1] if lags else 0.0,
        target_rate=target, achieved_send_rate=achieved, client_cpu_s=outcome.client_cpu_s,
        client_cpu_per_1k_requests_s=outcome.client_cpu_s * 1000.0 / max(1, len(sent)),
        client_limited=bool(reasons), reasons=reasons)


async def warm_up(plan: LoadPlan, bodies: list[bytes], concurrency: int) -> int:
    """Send warm-up requests that are not measured; returns how many succeeded."""
    if not bodies:
        return 0
    warm = LoadPlan(plan.base_url, plan.endpoint, bodies, None, max(1, min(concurrency, len(bodies))), None,
                    plan.timeout_s, plan.grace_s, plan.api_key, plan.policy)
    outcome = await run_load(warm, workers=1, stop=lambda: False, progress=Progress(len(bodies)), start_delay_s=0.0)
    with contextlib.suppress(Exception):
        gc.collect()
    return len(outcome.records.ok_rows())
