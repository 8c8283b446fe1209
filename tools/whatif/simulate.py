"""A step-level model of vLLM V1's scheduler, driven by run_benchmark's arrival processes.

Each loop iteration is one engine step, scheduled as vLLM 0.32's `Scheduler.schedule` does it (the
behaviours and their source lines are in knowledge/entries/whatif.yaml): running requests first, in
admission order, each taking what it still needs (one token when decoding, the rest of its prompt
when prefilling) from the `max_num_batched_tokens` budget; KV blocks of `block_size` tokens taken on
demand, and when none are left the newest running request is preempted by recompute (blocks freed,
back to the front of the queue); then, only if nobody was preempted, waiting requests are admitted in
order while budget, `max_num_seqs` and free blocks allow (the whole sequence must fit, as
`scheduler_reserve_full_isl` asks). A step lasts what the calibrated StepModel says for its mix.

The loop touches each scheduled request once per step and keeps no per-token objects: inter-token
gaps of requests that decoded in consecutive steps equal the step's length, so ITL is kept as a
weighted distribution of step lengths plus the few gaps a preemption stretched.

Simplified (see the knowledge entry): no prefix-cache hits (a resumed request recomputes everything),
no speculative decoding, no async-scheduling overlap, one engine (no DP), no stop strings or EOS
(outputs run to output_len, as run_benchmark's ignore_eos).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vllm_tune.tools.errors import BadInputError

# vLLM 0.32 defaults for the OpenAI server (engine/arg_utils.py get_batch_defaults): CPU 2048/128,
# GPUs under 70 GiB 2048/256, H100/H200 8192/1024. The caller passes the server's own values.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
DEFAULT_MAX_NUM_SEQS = 128
MAX_SIM_REQUESTS = 200_000
MAX_SIM_STEPS = 20_000_000

# How far a simulated number can be read: an estimate, or only a bound when the calibration runs could not tell
# apart a cost the prediction needs (what_if's bounded_by).
EstimateKind = Literal["estimate", "best case", "worst case", "no bound"]


class EngineConfig(BaseModel):
    """The scheduler and KV-cache settings the simulated server runs with."""

    model_config = ConfigDict(extra="forbid")

    max_num_seqs: int = Field(default=DEFAULT_MAX_NUM_SEQS, ge=1, le=65_536)
    max_num_batched_tokens: int = Field(default=DEFAULT_MAX_NUM_BATCHED_TOKENS, ge=1, le=10_000_000)
    block_size: int = Field(default=16, ge=1, le=4096)
    num_gpu_blocks: int = Field(default=100_000, ge=1, le=1 << 31,
                                description="KV blocks of the server (cache_config_info num_gpu_blocks)")
    max_model_len: int | None = Field(default=None, ge=1)
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    watermark: float = Field(default=0.0, ge=0.0, lt=1.0)
    enable_chunked_prefill: bool = True
    scheduler_reserve_full_isl: bool = True

    @property
    def usable_blocks(self) -> int:
        """Blocks requests can hold: vLLM takes the first block of the pool as its null block."""
        return max(1, self.num_gpu_blocks - 1)

    def check(self) -> None:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise BadInputError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                                f"({self.max_num_seqs}); vLLM refuses to start otherwise")


class StepModel(BaseModel):
    """Seconds one engine step takes: fixed + per decode sequence + per prefill token + per context token."""

    model_config = ConfigDict(extra="forbid")

    fixed_s: float = Field(default=0.005, ge=0)
    per_decode_seq_s: float = Field(default=0.0001, ge=0)
    per_prefill_token_s: float = Field(default=0.00002, ge=0)
    per_context_token_s: float = Field(default=0.0, ge=0,
                                       description="per token of context the decoding sequences attend to")
    request_overhead_s: float = Field(default=0.0, ge=0,
                                      description="from send until the engine can schedule the request "
                                                  "(HTTP, tokenisation, engine hand-off)")
    overhead_per_request_in_flight_s: float = Field(
        default=0.0, ge=0, description="added to the hand-off for each other request in flight when it is sent: "
                                       "after each step the API server and the client stream every request in "
                                       "flight, and a new one waits its turn among them; sent that long or more "
                                       "after the step's end (an open loop's arrival may be), it waits none")
    idle_wake_s: float = Field(
        default=0.0, ge=0, le=1.0,
        description="added to the hand-off of a request sent while no other is in flight: an idle server takes "
                    "longer to start on it (fitted only where runs had such arrivals: an open loop at a low rate)")
    overhead_per_request_sent_alongside_s: float = Field(
        default=0.0, ge=0, le=0.1,
        description="added to the hand-off for each other request sent at the same instant (a closed loop's "
                    "requests that finished in one step): the API server takes a burst in together")
    stream_start_s: float = Field(default=0.0, ge=0,
                                  description="from send until the response stream delivers anything: tokens "
                                              "the engine made before then reach the client together")
    stream_per_seq_s: float = Field(
        default=0.0, ge=0, le=0.01,
        description="API-server time per stream and delivery round: when the streams a step gives a token to take "
                    "longer than the step (streams x this > step), each stream's tokens reach its client merged into "
                    "fewer chunks, and the client counts one gap a chunk")
    intake_gap_s: float = Field(
        default=0.0, ge=0, le=0.1,
        description="the API server takes new requests in one after another: a request reaches the engine no sooner "
                    "than this after the request sent before it (a burst of sends reaches it spread out); fitted, "
                    "one value for a run's first wave on new connections and for the requests after it")
    itl_spread: float = Field(default=0.0, ge=0, le=3,
                              description="log-normal sigma of delivered inter-token gaps around the engine's step "
                                          "time (mean kept): how unevenly tokens reach the client")
    tpot_spread: float = Field(default=0.0, ge=0, le=3,
                               description="log-normal sigma of each request's decode time around the simulated one "
                                           "(mean kept): how unevenly the host runs from one request's life to "
                                           "another's, which the deterministic steps do not show")

    def hand_off_s(self, others_in_flight: int, idle: int = 0, alongside: int = 0) -> float:
        """From send to schedulable for a request sent with `others_in_flight` (idle: 1 when none was), `alongside`
        of them sent at the same instant."""
        return (self.request_overhead_s + self.overhead_per_request_in_flight_s * others_in_flight
                + self.idle_wake_s * idle + self.overhead_per_request_sent_alongside_s * alongside)

    def step_seconds(self, decode_seqs: int, prefill_tokens: int, context_tokens: int) -> float:
        return (self.fixed_s + self.per_decode_seq_s * decode_seqs + self.per_prefill_token_s * prefill_tokens
                + self.per_context_token_s * context_tokens)


@dataclass
class Load:
    """What the simulated clients send: open loop (offsets) or closed loop (concurrency)."""

    lens: list[tuple[int, int]]  # (prompt tokens, output tokens) per request, in send order
    offsets: list[float] | None = None
    concurrency: int | None = None
    max_concurrency: int | None = None
    duration_s: float | None = None  # stop sending after this long (as run_benchmark's duration_s)
    request_rate: float | str = "inf"
    burstiness: float = 1.0

    def check(self, cfg: EngineConfig) -> None:
        if not self.lens:
            raise BadInputError("the simulated load has no requests")
        if len(self.lens) > MAX_SIM_REQUESTS:
            raise BadInputError(f"at most {MAX_SIM_REQUESTS} simulated requests")
        if self.offsets is None and not self.concurrency:
            raise BadInputError("a simulated load needs arrival offsets or a concurrency")
        if self.offsets is not None and len(self.offsets) != len(self.lens):
            raise BadInputError("offsets and lengths differ in number")
        for p, o in self.lens:
            if p < 1 or o < 1:
                raise BadInputError("prompt and output lengths must be at least 1 token")
            if cfg.max_model_len and p + o > cfg.max_model_len:
                raise BadInputError(f"prompt {p} + output {o} tokens exceeds max_model_len {cfg.max_model_len}")
            if math.ceil((p + o) / cfg.block_size) > cfg.usable_blocks:
                raise BadInputError(f"a request of {p}+{o} tokens needs more KV blocks than the server has "
                                    f"({cfg.usable_blocks} usable x {cfg.block_size} tokens)")
            if not cfg.enable_chunked_prefill and p + o > cfg.max_num_batched_tokens:
                raise BadInputError("without chunked prefill every sequence must fit max_num_batched_tokens")


@dataclass
class Trace:
    """Per-request times (seconds from the start) and the step log the metrics are computed from."""

    send: list[float]
    first: list[float]
    last: list[float]
    preemptions: list[int]
    step_durations: list[float] = field(default_factory=list)
    step_ends: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)  # tokens the step sent to clients
    steady_gaps: list[int] = field(default_factory=list)  # per step: gaps equal to that step's duration
    odd_gaps: list[float] = field(default_factory=list)  # gaps stretched by preemption or a skipped step
    timeline: list[dict[str, float]] = field(default_factory=list)
    steps: int = 0
    busy_s: float = 0.0
    total_preemptions: int = 0
    # Kept only for calibration (keep_windows): each step's (decode seqs, prefill tokens, context tokens),
    # and per request the other requests in flight when it was sent, the step it first waited for (with
    # the fraction of the step before it that it waited through), the step of its first token and of its last.
    step_features: list[tuple[int, int, int]] = field(default_factory=list)
    # With an intake gap, a request that waited behind the one before it takes its count from the request that
    # started that queue: its hand-off is that request's, plus the gaps (hand_off_extra).
    others_at_send: list[int] = field(default_factory=list)
    idle_at_send: list[int] = field(default_factory=list)  # 1: sent while no other request was in flight
    alongside_at_send: list[int] = field(default_factory=list)  # other requests sent at the same instant
    # Seconds from send to schedulable beyond request_overhead_s + the share for others_at_send: minus how long
    # after the last step's end it was sent (it waits the in-flight share only while that lasts; others_at_send is
    # 0 for a request sent after it), or the wait in the intake queue. The calibration's rows carry it as their
    # constant.
    hand_off_extra: list[float] = field(default_factory=list)
    ready_step: list[int] = field(default_factory=list)
    ready_frac: list[float] = field(default_factory=list)
    first_step: list[int] = field(default_factory=list)
    last_step: list[int] = field(default_factory=list)


def _blocks(tokens: int, bs: int) -> int:
    return -(-tokens // bs)


class _Engine:
    """One simulated server: request state in flat lists indexed by request number."""

    def __init__(self, cfg: EngineConfig, model: StepModel, load: Load, keep_windows: bool) -> None:
        n = len(load.lens)
        self.cfg, self.model, self.load, self.keep = cfg, model, load, keep_windows
        self.n = n
        self.plen = [p for p, _ in load.lens]
        self.olen = [o for _, o in load.lens]
        self.computed = [0] * n
        self.gen = [0] * n
        self.held = [0] * n
        self.free = cfg.usable_blocks
        self.running: list[int] = []
        self.waiting: deque[int] = deque()
        self.ready: list[tuple[float, int]] = []  # heap: sent, not yet visible to the scheduler
        self.tr = Trace([math.nan] * n, [math.nan] * n, [math.nan] * n, [0] * n)
        if keep_windows:
            self.tr.ready_step, self.tr.ready_frac = [0] * n, [0.0] * n
            self.tr.others_at_send = [0] * n
            self.tr.idle_at_send = [0] * n
            self.tr.alongside_at_send = [0] * n
            self.tr.hand_off_extra = [0.0] * n
            self.tr.first_step, self.tr.last_step = [0] * n, [0] * n
        self.cap = (load.max_concurrency if load.offsets is not None else load.concurrency) or n
        self.deadline = load.duration_s if load.duration_s else math.inf
        self.next_send = 0
        self.in_flight = 0
        self.last_intake = -math.inf  # when the request sent before reached the engine
        self.queue_head_others = 0  # others_at_send of the request that started the current intake queue
        self.queue_head_idle = 0  # and whether it was sent to an idle server
        self.queue_head_alongside = 0
        self.releases: list[float] = []  # when clients see their request's last token (frees their slot)
        self.finished = 0
        self.blocked_by_cap = False
        self.t = 0.0
        self.prev_end = -1.0
        self.prev_dur = 0.0
        self.step_ends: deque[float] = deque([0.0], maxlen=2)  # the last two step ends (0: the run's start)
        self.steps = 0

    def send_due(self) -> None:
        """Clients send what their schedule (open loop) or a free slot (closed loop, capped) allows by now."""
        now, offsets, send = self.t, self.load.offsets, self.tr.send
        hand_off = self.model.hand_off_s
        gap = self.model.intake_gap_s
        while self.releases and self.releases[0] <= now:
            heapq.heappop(self.releases)
            self.in_flight -= 1
        sends: list[tuple[int, float]] = []
        k, flying = self.next_send, self.in_flight
        while k < self.n and flying < self.cap:
            at = now
            if offsets is not None:
                at = offsets[k]
                if at > now:
                    break
                if self.blocked_by_cap:
                    at = now  # it waited client-side for a slot, which opened at this step boundary
            if at >= self.deadline:
                k = self.n
                break
            sends.append((k, at))
            k, flying = k + 1, flying + 1
        self.next_send = k
        # Requests sent at one instant (a closed loop's that finished in one step, sent again together) are taken in
        # together by the API server: each waits for the others of its burst.
        at_instant = Counter(at for _, at in sends) if len(sends) > 1 else None
        for r, at in sends:
            send[r] = at
            others, late = self.in_flight, 0.0
            idle = int(others == 0)
            alongside = at_instant[at] - 1 if at_instant else 0
            if others:
                # The API server and the client spend a share per stream in flight after each step's end; a request
                # sent as a step ends (a closed loop's next one) waits all of it, one sent later only the rest.
                # (Sends are handled at the step boundary after them: the step before them is one of the last two.)
                end = next((e for e in reversed(self.step_ends) if e <= at), 0.0)
                late = at - end
                # Past the share: it waits none. Sent right at the step's end it keeps its count even while the share
                # is zero, so that a fit starting from no share still sees what the share would cost.
                if late > others * self.model.overhead_per_request_in_flight_s:
                    others, late = 0, 0.0
            own = at + hand_off(others, idle, alongside) - late
            # Taken in after the request sent before it: the API server's intake is one queue (measured with
            # bench/bench_request_path.py --intake on the suite's server: a closed loop's first wave of 48, on new
            # connections, reached add_request 2-2.5 ms apart, later requests that queued 0.35 ms apart; the
            # calibration fits one gap for both).
            behind = gap > 0 and self.last_intake + gap > own
            ready = self.last_intake + gap if behind else own
            if not behind:
                self.queue_head_others, self.queue_head_idle = others, idle
                self.queue_head_alongside = alongside
            self.last_intake = ready
            heapq.heappush(self.ready, (ready, r))
            if self.keep:
                self.tr.others_at_send[r] = self.queue_head_others
                self.tr.idle_at_send[r] = self.queue_head_idle
                self.tr.alongside_at_send[r] = self.queue_head_alongside
                head = hand_off(self.queue_head_others, self.queue_head_idle, self.queue_head_alongside)
                self.tr.hand_off_extra[r] = ready - at - head if behind else -late
            self.in_flight += 1
        self.blocked_by_cap = self.next_send < self.n and self.in_flight >= self.cap and (
            offsets is None or offsets[self.next_send] <= now)
        while self.ready and self.ready[0][0] <= now:
            at, r = heapq.heappop(self.ready)
            self.waiting.append(r)
            if self.keep:
                self.tr.ready_step[r] = self.steps
                whole = self.prev_end == now and self.prev_dur > 0
                self.tr.ready_frac[r] = min(1.0, (now - at) / self.prev_dur) if whole else 0.0

    def next_event(self) -> float:
        """With nothing to schedule: when something next becomes schedulable (inf: never)."""
        upcoming = self.ready[0][0] if self.ready else math.inf
        offsets = self.load.offsets
        if offsets is not None and self.next_send < self.n and self.in_flight < self.cap:
            upcoming = min(upcoming, offsets[self.next_send])
        if self.releases and self.next_send < self.n:
            upcoming = min(upcoming, self.releases[0])
        return upcoming

    def schedule_running(self, dec: list[int], pre: list[int], pre_n: list[int]) -> tuple[int, bool]:
        """Running requests in order; returns the budget left and whether anyone was preempted."""
        cfg = self.cfg
        bs, lpt = cfg.block_size, cfg.long_prefill_token_threshold
        plen, gen, computed, held, running = self.plen, self.gen, self.computed, self.held, self.running
        budget = cfg.max_num_batched_tokens
        free = self.free
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            k = plen[r] + gen[r] - computed[r]
            if 0 < lpt < k:
                k = lpt
            if k > budget:
                k = budget
            want = -(-(computed[r] + k) // bs) - held[r]
            self_preempted = False
            while want > free:
                victim = running.pop()  # FCFS: the newest running request
                free += held[victim]
                self.preempt(victim)
                preempted = True
                if victim == r:
                    self_preempted = True
                    break
            if self_preempted:
                break
            if want > 0:
                free -= want
                held[r] += want
            if k == 1 and computed[r] >= plen[r]:
                dec.append(r)
            else:
                pre.append(r)
                pre_n.append(k)
            budget -= k
            i += 1
        self.free = free
        return budget, preempted

    def preempt(self, r: int) -> None:
        self.held[r] = 0
        self.computed[r] = 0
        self.tr.preemptions[r] += 1
        self.tr.total_preemptions += 1
        self.waiting.appendleft(r)

    def admit_waiting(self, budget: int, pre: list[int], pre_n: list[int]) -> int:
        cfg = self.cfg
        bs, lpt = cfg.block_size, cfg.long_prefill_token_threshold
        wm_blocks = int(cfg.watermark * cfg.num_gpu_blocks)  # as vLLM: a share of the whole pool
        waiting, running = self.waiting, self.running
        while budget > 0 and waiting and len(running) < cfg.max_num_seqs:
            r = waiting[0]
            total = self.plen[r] + self.gen[r]
            k = total - self.computed[r]
            if 0 < lpt < k:
                k = lpt
            if not cfg.enable_chunked_prefill and k > budget:
                break
            k = min(k, budget)
            wm = wm_blocks if running else 0
            if cfg.scheduler_reserve_full_isl and _blocks(total, bs) + wm > self.free:
                break
            want = _blocks(k, bs)
            if want + wm > self.free:
                break
            waiting.popleft()
            running.append(r)
            self.free -= want
            self.held[r] = want
            pre.append(r)
            pre_n.append(k)
            budget -= k
        return budget

    def finish_step(self, dec: list[int], pre: list[int], pre_n: list[int], end: float) -> int:
        """Apply one step's outputs: decodes emit a token each; a prefill that reached the end of what it
        had to compute emits its next token (the first, or the next one after a recompute)."""
        tr, gen, computed, olen, plen = self.tr, self.gen, self.computed, self.olen, self.plen
        last, odd, prev_end = tr.last, tr.odd_gaps, self.prev_end
        step = self.steps - 1
        n_steady = 0
        done: list[int] = []
        for r in dec:
            computed[r] += 1
            gen[r] += 1
            if last[r] == prev_end:
                n_steady += 1
            else:
                odd.append(end - last[r])
            last[r] = end
            if gen[r] >= olen[r]:
                done.append(r)
        firsts = 0
        for j, r in enumerate(pre):
            computed[r] += pre_n[j]
            if computed[r] == plen[r] + gen[r]:
                firsts += 1
                gen[r] += 1
                if gen[r] == 1:
                    tr.first[r] = end
                    if self.keep:
                        tr.first_step[r] = step
                else:
                    odd.append(end - last[r])
                last[r] = end
                if gen[r] >= olen[r]:
                    done.append(r)
        tr.steady_gaps.append(n_steady)
        tr.step_tokens.append(len(dec) + firsts)
        if done:
            gone = set(done)
            self.running = [r for r in self.running if r not in gone]
            for r in done:
                self.free += self.held[r]
                self.held[r] = 0
                if self.keep:
                    tr.last_step[r] = step
            self.finished += len(done)
            visible = self.model.stream_start_s
            for r in done:
                heapq.heappush(self.releases, max(end, tr.send[r] + visible))
        return len(done)


def run(cfg: EngineConfig, model: StepModel, load: Load, *, sample_every_s: float | None = None,
        keep_windows: bool = False) -> Trace:
    """Simulate `load` against a server with `cfg` whose steps take what `model` says.

    keep_windows=True also keeps each step's mix and, per request, the steps that bound its TTFT and its
    decode phase (what calibration regresses on)."""
    cfg.check()
    load.check(cfg)
    eng = _Engine(cfg, model, load, keep_windows)
    tr = eng.tr
    fixed, per_dec, per_pre, per_ctx = model.fixed_s, model.per_decode_seq_s, model.per_prefill_token_s, \
        model.per_context_token_s
    budget_max = cfg.max_num_batched_tokens
    sample_dt = sample_every_s or 1.0
    next_sample = 0.0
    while eng.finished < eng.next_send or (eng.next_send < eng.n and eng.t < eng.deadline):
        eng.send_due()
        if not eng.running and not eng.waiting:
            upcoming = eng.next_event()
            if math.isinf(upcoming):
                break
            eng.t = max(upcoming, eng.t)
            continue
        dec: list[int] = []
        pre: list[int] = []
        pre_n: list[int] = []
        budget, preempted = eng.schedule_running(dec, pre, pre_n)
        if not preempted:  # vLLM admits no waiting request in a step that preempted
            budget = eng.admit_waiting(budget, pre, pre_n)
        n_dec = len(dec)
        prefill_tokens = budget_max - budget - n_dec
        ctx = 0
        if per_ctx or keep_windows:
            computed = eng.computed
            for r in dec:
                ctx += computed[r]
        dur = fixed + per_dec * n_dec + per_pre * prefill_tokens + per_ctx * ctx
        end = eng.t + dur
        eng.steps += 1
        if keep_windows:
            tr.step_features.append((n_dec, prefill_tokens, ctx))
        eng.finish_step(dec, pre, pre_n, end)
        tr.step_durations.append(dur)
        tr.step_ends.append(end)
        while end >= next_sample:
            tr.timeline.append({"t_s": next_sample, "running": float(len(eng.running)),
                                "waiting": float(len(eng.waiting)),
                                "kv_cache_usage": 1.0 - eng.free / cfg.usable_blocks,
                                "preemptions": float(tr.total_preemptions)})
            next_sample += sample_dt
        eng.prev_end, eng.prev_dur, eng.t = end, dur, end
        eng.step_ends.append(end)
        if eng.steps > MAX_SIM_STEPS:
            raise BadInputError(f"simulation stopped after {MAX_SIM_STEPS} steps; shorten the load")
    tr.steps = eng.steps
    tr.busy_s = sum(tr.step_durations)
    return tr
