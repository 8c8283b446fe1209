"""A step-time model of the running server, fitted from runs it served.

Model: one engine step takes fixed + b*decode_seqs + c*prefill_tokens + d*context_tokens seconds, and a
request becomes schedulable request_overhead_s after it is sent. A run's mean TTFT and mean TPOT
(and, for a closed loop, its duration) are sums of the step times in known windows, so with the step
mix held fixed they are linear in the five coefficients. The fit alternates: simulate the measured
loads with the current coefficients to get each window's step mix, solve non-negative least squares
on relative errors, repeat until the coefficients settle (a fixed point, usually 3-6 rounds).

Sources of runs: (a) a short probe this module sends itself through run_benchmark (closed loops at a
few concurrencies and prompt lengths; loopback or allowlisted, confirmed like run_benchmark), (b)
saved run_benchmark results (no load sent), or (c) a passive /metrics window (see passive.py).
"""

from __future__ import annotations

import json
import math
import random
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from vllm_tune.tools.bench.api import RunBenchmarkInput, check_target, run_benchmark
from vllm_tune.tools.bench.store import MAX_RESULT_BYTES
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.files import allowed, read_text
from vllm_tune.tools.whatif.fit import nonnegative_least_squares
from vllm_tune.tools.whatif.results import load_from_request, summarize
from vllm_tune.tools.whatif.simulate import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    EngineConfig,
    Load,
    StepModel,
    Trace,
    run,
)

# The API server's time per new request in its intake queue (StepModel.intake_gap_s), in seconds, tried on a grid:
# bench/bench_request_path.py --intake measured 2-2.5 ms between the requests of a closed loop's first wave (new
# connections) and 0.35 ms between later ones that queued; one gap stands for both (every probe run starts with a
# first wave), and over the five saved runs of the accuracy protocol these values fitted best (17 misses to 13).
INTAKE_GAP_GRID_S = (0.0, 0.0005, 0.001, 0.0015)
COEFFICIENTS = ("fixed_s", "per_decode_seq_s", "per_prefill_token_s", "per_context_token_s", "request_overhead_s",
                "overhead_per_request_in_flight_s", "idle_wake_s", "overhead_per_request_sent_alongside_s",
                "stream_start_s")
# Damped rounds close in slowly: with the cost per request sent alongside beside the one per request in flight, a
# fit of synthetic runs needed 20 (the saved real runs replay alike with 12 or 24).
MAX_ROUNDS = 24
# After this many rounds each round moves the coefficients half way to its solution: which requests wait in the
# intake queue behind another (simulate.py, StepModel.intake_gap_s) can flip between rounds, and the plain
# iteration then cycles between two points (on synthetic runs it never settled on the truth; damped, it did).
DAMP_AFTER = 4


class ProbePoint(BaseModel):
    concurrency: int = Field(ge=1, le=256)
    input_len: int = Field(ge=1, le=100_000)
    output_len: int = Field(ge=2, le=4096)
    num_prompts: int = Field(ge=4, le=2000)
    # Lengths drawn within +/- this share of input_len and output_len (run_benchmark's range_ratio): requests then
    # finish, and a closed loop sends their successors, one at a time instead of in waves.
    range_ratio: float = Field(default=0.0, ge=0, lt=1)


# Short by design: about 330 requests, spanning batch size and prompt length so that the per-sequence and
# per-prompt-token costs are told apart, with outputs long enough that the engine rather than the start of
# the response stream sets each request's time. No single-stream point: on a busy host a lone
# stream stalls far more per token than a batch does (measured on the suite's CPU server), which no
# per-step cost model reproduces and which would skew the fit for every other load. The last point spreads its
# lengths so that its closed loop sends requests one at a time rather than in waves, as accuracy.QUICK_PROBE's
# fifth point does (which took five runs of the accuracy bench from 14 misses to 8).
DEFAULT_PROBE = [
    ProbePoint(concurrency=4, input_len=32, output_len=128, num_prompts=24),
    ProbePoint(concurrency=16, input_len=64, output_len=128, num_prompts=64),
    ProbePoint(concurrency=8, input_len=512, output_len=64, num_prompts=40),
    ProbePoint(concurrency=32, input_len=128, output_len=96, num_prompts=96),
    ProbePoint(concurrency=16, input_len=384, output_len=64, num_prompts=64),
    ProbePoint(concurrency=8, input_len=64, output_len=128, num_prompts=40, range_ratio=0.5),
]


class Residual(BaseModel):
    run: str
    metric: str
    measured: float
    fitted: float
    relative_error: float


class Calibration(BaseModel):
    """A fitted step model, what it was fitted on, and how well it reproduces those runs."""

    step_model: StepModel
    engine: EngineConfig = Field(description="the server's scheduler/KV settings during calibration")
    source: str = Field(description="probe, results or metrics")
    conditions: dict[str, Any] = Field(default_factory=dict, description="server, model, loads, date")
    rounds: int = 0
    converged: bool = False
    residuals: list[Residual] = Field(default_factory=list)
    max_abs_relative_error: float | None = None
    notes: list[str] = Field(default_factory=list)


@dataclass
class Observed:
    """One measured run and the simulated load that reproduces it."""

    label: str
    load: Load
    result: dict[str, Any]
    # The scheduler settings this run was served with, when they differ between runs (saved results of
    # servers started with other flags); None: the calibration's engine.
    engine: EngineConfig | None = None


def _flag(flags: dict[str, str], name: str) -> str | None:
    for key in (name, name.replace("_", "-"), "--" + name.replace("_", "-")):
        if key in flags:
            return flags[key]
    return None


def engine_from(cache_config: dict[str, str], serve_flags: dict[str, str] | None = None,
                max_model_len: int | None = None) -> EngineConfig:
    """The server's EngineConfig: KV blocks and block size from cache_config_info, scheduler limits from the
    serve flags the caller knows (vLLM does not export them), else vLLM's CPU/small-GPU defaults."""
    flags = serve_flags or {}

    def as_int(value: str | None) -> int | None:
        try:
            return int(str(value)) if value not in (None, "", "None") else None
        except ValueError:
            return None

    blocks = as_int(cache_config.get("num_gpu_blocks_override")) or as_int(cache_config.get("num_gpu_blocks"))
    block_size = as_int(cache_config.get("block_size"))
    if blocks is None or block_size is None:
        raise BadInputError("the server's KV cache size is unknown: /metrics had no cache_config_info with "
                            "num_gpu_blocks and block_size (give num_gpu_blocks and block_size)")
    values: dict[str, Any] = {
        "num_gpu_blocks": blocks, "block_size": block_size, "max_model_len": max_model_len,
        "max_num_seqs": as_int(_flag(flags, "max_num_seqs")) or DEFAULT_MAX_NUM_SEQS,
        "max_num_batched_tokens": as_int(_flag(flags, "max_num_batched_tokens")) or DEFAULT_MAX_NUM_BATCHED_TOKENS,
    }
    lpt = as_int(_flag(flags, "long_prefill_token_threshold"))
    if lpt is not None:
        values["long_prefill_token_threshold"] = lpt
    return EngineConfig(**values)


def observed_from_result(result: dict[str, Any], label: str | None = None) -> Observed:
    """Rebuild the load of a saved run_benchmark result (its provenance) so it can be simulated."""
    prov = result.get("provenance") or {}
    load = prov.get("load") or {}
    work = prov.get("workload") or {}
    n = int(result.get("num_prompts") or 0)
    if not n or not work:
        raise BadInputError("the result has no provenance block (load and workload); was it saved by "
                            "vllm-tune bench / run_benchmark?")
    if work.get("kind") not in ("random", None):
        raise BadInputError(f"calibration needs random-prompt runs (exact lengths); this one is {work.get('kind')}")
    req = RunBenchmarkInput(
        url=str(prov.get("server_url") or "http://127.0.0.1:1"), concurrency=load.get("concurrency"),
        rate=load.get("rate") if load.get("concurrency") is None else None, num_prompts=n,
        arrival=load.get("arrival") or "poisson", burstiness=float(load.get("burstiness") or 1.0),
        max_concurrency=load.get("max_concurrency") if load.get("concurrency") is None else None,
        input_len=int(work.get("input_len") or 256), output_len=int(work.get("output_len") or 128),
        range_ratio=float(work.get("range_ratio") or 0.0), seed=int(prov.get("seed") or 0))
    lengths = list(zip(result.get("input_lens") or [], result.get("output_lens") or [], strict=False))
    sim_load = load_from_request(req, lengths or None)
    name = label or str(result.get("label") or f"c={req.concurrency}" if req.concurrency else f"rate={req.rate}")
    return Observed(name, sim_load, result)


def _prefix(tr: Trace) -> list[list[float]]:
    """Cumulative (steps, decode seqs, prefill tokens, context tokens) over steps: row s = sum of steps < s."""
    out = [[0.0, 0.0, 0.0, 0.0]]
    acc = [0.0, 0.0, 0.0, 0.0]
    for d, p, c in tr.step_features:
        acc = [acc[0] + 1, acc[1] + d, acc[2] + p, acc[3] + c]
        out.append(acc)
    return out


def _window(pre: list[list[float]], a: int, b: int) -> list[float]:
    """Feature sums of steps a..b inclusive."""
    if b < a:
        return [0.0] * 4
    return [pre[b + 1][j] - pre[a][j] for j in range(4)]


def _rows(obs: Observed, tr: Trace, model: StepModel) -> list[tuple[str, list[float], float, float]]:
    """(metric, coefficient row, target, measured value) for one run, in seconds; the target is the measured value
    less the row's constant.

    A client sees a request's first and last token at max(engine time, send + stream_start); each request
    contributes the branch that the current coefficients make the larger, so the rows are linear in them
    for this round of the fixed point. A request sent after a step's end waits the in-flight share less how late
    it came (while the share lasts); one that waited in the API server's intake queue behind others takes the count
    of the request that started the queue and adds the gaps. Either is the constant, carried as a last column of each
    row (Trace.hand_off_extra)."""
    pre = _prefix(tr)
    feats = tr.step_features
    coef = [getattr(model, k) for k in COEFFICIENTS]
    stream_row = [0.0] * (len(COEFFICIENTS) - 1) + [1.0, 0.0]

    res = obs.result
    floor = model.stream_start_s

    def engine_shows(metric: str) -> bool:
        # A run measured well above the floor is engine-bound whatever the current coefficients say; without
        # this a round that puts every cost under the floor would never see the engine again.
        return float(res.get(f"{metric}_ms") or 0.0) / 1000.0 > 1.1 * floor

    ttft_engine, e2el_engine = engine_shows("mean_ttft"), engine_shows("mean_e2el")

    def visible(row: list[float], forced: bool) -> list[float]:
        engine = sum(a * b for a, b in zip(row, coef, strict=False)) + row[-1]
        return row if forced or engine >= floor else stream_row

    ttft_rows: list[list[float]] = []
    e2el_rows: list[list[float]] = []
    tpot_rows: list[list[float]] = []
    for r, (_p, o) in enumerate(obs.load.lens):
        if math.isnan(tr.last[r]):
            continue
        w = _window(pre, tr.ready_step[r], tr.first_step[r])
        if tr.ready_step[r] > 0 and tr.ready_frac[r] > 0:
            d, p, c = feats[tr.ready_step[r] - 1]
            f = tr.ready_frac[r]
            w = [w[0] + f, w[1] + f * d, w[2] + f * p, w[3] + f * c]
        dw = _window(pre, tr.first_step[r] + 1, tr.last_step[r])
        hand_off = [1.0, float(tr.others_at_send[r]), float(tr.idle_at_send[r]), float(tr.alongside_at_send[r])]
        extra = tr.hand_off_extra[r]
        ttft = visible([*w, *hand_off, 0.0, extra], ttft_engine)
        e2el = visible([a + b for a, b in zip(w, dw, strict=True)] + [*hand_off, 0.0, extra], e2el_engine)
        ttft_rows.append(ttft)
        e2el_rows.append(e2el)
        if o > 1:
            tpot_rows.append([(a - b) / (o - 1) for a, b in zip(e2el, ttft, strict=True)])
    out: list[tuple[str, list[float], float, float]] = []

    def add(metric: str, row: list[float], y: float) -> None:
        out.append((metric, row[:-1], y - row[-1], y))

    # Means, not medians: they are linear in the coefficients and consistent with the run's duration. A server
    # whose tokens reach the client in bursts has per-request TPOT medians near zero.
    for metric, rows in (("mean_ttft", ttft_rows), ("mean_e2el", e2el_rows), ("mean_tpot", tpot_rows)):
        if rows and res.get(f"{metric}_ms"):
            add(metric, _mean_rows(rows), float(res[f"{metric}_ms"]) / 1000.0)
    if obs.load.offsets is None and obs.load.concurrency and res.get("duration") and e2el_rows:
        # A closed loop runs its requests back to back per client: duration = requests x mean E2EL / clients.
        share = len(e2el_rows) / obs.load.concurrency
        add("duration", [v * share for v in _mean_rows(e2el_rows)], float(res["duration"]))
    return out


def _mean_rows(rows: list[list[float]]) -> list[float]:
    return [sum(col) / len(rows) for col in zip(*rows, strict=True)]


def _initial(observed: list[Observed]) -> StepModel:
    tpots = [float(o.result.get("mean_tpot_ms") or 0) / 1000.0 for o in observed]
    ttfts = [float(o.result.get("mean_ttft_ms") or 0) / 1000.0 for o in observed]
    base = min((t for t in tpots if t > 0), default=0.01)
    # Start the stream-start floor at half the smallest mean TTFT, so that the fit can see whether it binds.
    return StepModel(fixed_s=base, per_decode_seq_s=0.0, per_prefill_token_s=0.0, per_context_token_s=0.0,
                     request_overhead_s=0.0, overhead_per_request_in_flight_s=0.0,
                     stream_start_s=0.5 * min((t for t in ttfts if t > 0), default=0.0))


def _weighted(found: list[tuple[str, list[float], float, float]]) -> tuple[list[list[float]], list[float]]:
    """Rows scaled for relative error of the measured value, with each metric's scale floored at half its median
    over the runs: one run whose tokens all arrived in one burst (mean TPOT near zero) must not outweigh every
    other run. Items are (metric, row, target: the measured value less the row's constant, measured value)."""
    by_metric: dict[str, list[float]] = {}
    for metric, _row, _y, measured in found:
        by_metric.setdefault(metric, []).append(measured)
    floor = {m: 0.5 * sorted(v)[len(v) // 2] for m, v in by_metric.items()}
    rows, ys = [], []
    for metric, row, y, measured in found:
        scale = max(measured, floor[metric])
        rows.append([v / scale for v in row])
        ys.append(y / scale)
    return rows, ys


def _starts(observed: list[Observed]) -> list[StepModel]:
    """Starting points of the fixed point. Concurrency raises TTFT through queued prefills and through the
    hand-off alike, and a start without any per-request hand-off can settle on prefill alone; so it is
    also started from the slope of the closed-loop runs' mean TTFT over their concurrency (and half that)."""
    base = _initial(observed)
    points = [(float(o.load.concurrency - 1), float(o.result.get("mean_ttft_ms") or 0.0) / 1000.0)
              for o in observed if o.load.offsets is None and o.load.concurrency and o.result.get("mean_ttft_ms")]
    slope = 0.0
    if len({x for x, _ in points}) > 1:
        mx = sum(x for x, _ in points) / len(points)
        my = sum(y for _, y in points) / len(points)
        slope = max(0.0, sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points))
    out = [base]
    if slope > 0:
        out += [base.model_copy(update={"overhead_per_request_in_flight_s": f * slope}) for f in (0.5, 1.0)]
    return out


def _fixed_point(observed: list[Observed], engine: EngineConfig, model: StepModel,
                 usable: list[bool]) -> tuple[StepModel, int, bool]:
    rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        found = [item for obs in observed
                 for item in _rows(obs, run(obs.engine or engine, model, obs.load, keep_windows=True), model)
                 if item[3] > 0]
        rows, ys = _weighted(found)
        coef = nonnegative_least_squares(rows, ys, usable)
        if coef is None:
            raise BadInputError("the runs cannot separate the step costs (too few or too alike); probe more "
                                "concurrencies and prompt lengths")
        if rounds > DAMP_AFTER:
            coef = [0.5 * (c + getattr(model, k)) for c, k in zip(coef, COEFFICIENTS, strict=True)]
        new = model.model_copy(update=dict(zip(COEFFICIENTS, (max(0.0, c) for c in coef), strict=True)))
        change = max(abs(getattr(new, k) - getattr(model, k)) / max(abs(getattr(new, k)), 1e-9)
                     for k in COEFFICIENTS if getattr(new, k) or getattr(model, k))
        model = new
        if change < 0.005:
            return model, rounds, True
    return model, rounds, False


# The share of a run's requests that must reach an idle server before the wake-up cost is fitted: a closed loop's
# only idle arrival is its first request, which cannot tell a wake-up from the rest of its hand-off.
IDLE_SHARE_TO_FIT = 0.25


# The share of a run's requests that must be sent with two or more others in flight and none at the same instant
# before a cost per request sent alongside is fitted beside the one per request in flight.
STAGGERED_SHARE_TO_FIT = 0.25


def _send_patterns(observed: list[Observed], engine: EngineConfig) -> tuple[bool, bool]:
    """Whether some run sent enough of its requests (1) while none was in flight, to fit the idle server's wake-up
    (open loops only), and (2) while two or more others were in flight and none was sent at the same instant: only
    then can the fit tell a cost per request sent alongside from one per request in flight (a closed loop of equal
    lengths sends its requests in bursts, so the two counts move together). One simulation per run serves both."""
    idle = staggered = False
    for obs in observed:
        tr = run(obs.engine or engine, StepModel(), obs.load, keep_windows=True)
        n = len(tr.others_at_send)
        if obs.load.offsets is not None and sum(tr.idle_at_send) >= IDLE_SHARE_TO_FIT * n:
            idle = True
        alone = sum(1 for o, a in zip(tr.others_at_send, tr.alongside_at_send, strict=True) if o >= 2 and a == 0)
        staggered = staggered or alone >= STAGGERED_SHARE_TO_FIT * n
    return idle, staggered


def _single_settings(observed: list[Observed], engine: EngineConfig) -> dict[str, int]:
    """The batch size (closed loops only, all at one concurrency) or prompt length (all prompts alike) that every
    run shared, if any. A cost per sequence or per prompt token cannot be told from the fixed costs then: the fit
    folds it into them, and what_if says its predictions for other sizes are bounds."""
    out: dict[str, int] = {}
    batches = {min(o.load.concurrency, (o.engine or engine).max_num_seqs) if o.load.offsets is None and
               o.load.concurrency else None for o in observed}
    if len(batches) == 1 and None not in batches:
        out["single_batch"] = int(next(iter(batches)) or 0)
    lens = {p for o in observed for p, _ in o.load.lens}
    if len(lens) == 1:
        out["single_input_len"] = next(iter(lens))
    return out


def fit(observed: list[Observed], engine: EngineConfig, *, source: str, conditions: dict[str, Any] | None = None,
        use_context: bool = True, intake_gaps: tuple[float, ...] = INTAKE_GAP_GRID_S) -> Calibration:
    """Fixed-point non-negative least squares of the step model on the observed runs, from each of a few
    starting points and then from the best of them with each intake gap of `intake_gaps` and, where some run sent
    requests apart, with the cost per request sent alongside; the one that reproduces the runs' throughput, TTFT and
    TPOT best is kept."""
    if not observed:
        raise BadInputError("calibration needs at least one measured run")
    idle_arrivals, staggered_sends = _send_patterns(observed, engine)
    usable = [True, True, True, use_context, True, True, idle_arrivals, False, True]
    seen = {"max_concurrency": max((o.load.concurrency or o.load.max_concurrency or 0) for o in observed) or None,
            "max_input_len": max(p for o in observed for p, _ in o.load.lens),
            "max_output_len": max(q for o in observed for _, q in o.load.lens),
            "runs": len(observed), **_single_settings(observed, engine)}

    def candidate(start: StepModel, usable: list[bool] = usable) -> tuple[float, Calibration]:
        model, rounds, converged = _fixed_point(observed, engine, start, usable)
        notes = [] if converged else [f"the fit had not settled after {MAX_ROUNDS} rounds (last change above 0.5 %)"]
        cal = Calibration(step_model=model, engine=engine, source=source,
                          conditions={**(conditions or {}), "seen": seen}, rounds=rounds, converged=converged,
                          notes=notes)
        # The spread of token gaps touches only ITL percentiles, so candidates are compared without them.
        errs = [r.relative_error ** 2 for r in residuals(cal, observed, metrics=FIT_SCORE_METRICS)]
        return (sum(errs) / len(errs) if errs else 0.0), cal

    best = min((candidate(start) for start in _starts(observed)), key=lambda c: c[0])
    # The intake gap delays a request by the gaps of those sent before it, which no row's coefficients carry: it
    # is a constant of each fixed point, tried on a grid from the best start without it.
    for gap in intake_gaps:
        if gap:
            tried = candidate(best[1].step_model.model_copy(update={"intake_gap_s": gap}))
            best = tried if tried[0] < best[0] else best
    if staggered_sends:
        # With runs that sent requests apart, the cost per request sent alongside is fitted too, from the solution
        # without it and from the first start (with its intake gap); kept only where it reproduces the runs better
        # (from a start of its own the fixed point can settle far from a truth without it).
        both = [u or k == "overhead_per_request_sent_alongside_s" for u, k in zip(usable, COEFFICIENTS, strict=True)]
        gap = best[1].step_model.intake_gap_s
        for start in (best[1].step_model, _starts(observed)[0].model_copy(update={"intake_gap_s": gap})):
            tried = candidate(start, both)
            best = tried if tried[0] < best[0] else best
    cal = best[1]
    cal.notes.extend(_prefix_cache_notes(observed))
    cal.notes.extend(_drift_notes(conditions or {}))
    # Chunking and spread change no engine step, so the winner's traces serve their fits and the residuals.
    traces = [run(obs.engine or engine, cal.step_model, obs.load) for obs in observed]
    cal.step_model = cal.step_model.model_copy(
        update={"stream_per_seq_s": fit_stream_per_seq(observed, engine, cal.step_model, traces)})
    cal.step_model = cal.step_model.model_copy(
        update={"itl_spread": fit_itl_spread(observed, engine, cal.step_model, traces)})
    cal.step_model = cal.step_model.model_copy(
        update={"tpot_spread": fit_tpot_spread(observed, engine, cal.step_model, traces)})
    cal.residuals = residuals(cal, observed, traces=traces)
    errs = [abs(r.relative_error) for r in cal.residuals]
    cal.max_abs_relative_error = max(errs) if errs else None
    return cal


# Above this share of prompt tokens served from the prefix cache a run's prefills were mostly not computed.
PREFIX_HIT_NOTE = 0.05
# A probe whose first point's TPOT moved more than this between the start and the end ran on a host whose speed
# changed under it (the same point moved 1.5 to 2.3 ms within ten minutes on the suite's 2-core VM).
PROBE_DRIFT_NOTE = 0.15


def _drift_notes(conditions: dict[str, Any]) -> list[str]:
    out: list[str] = []
    drifts = [d for d in conditions.get("probe_drifts") or [] if isinstance(d, dict)]
    if len(drifts) > 1:
        moved = ", ".join(f"{float(d['change']):+.0%}" for d in drifts)
        out.append(f"probed {len(drifts)} times because the host's speed moved under the probe ({moved}); fitted on "
                   "the probe that moved least")
    if _drift_size(conditions) <= PROBE_DRIFT_NOTE:
        return out
    drift = conditions["probe_drift"]
    return [*out, f"the host's speed changed during the probe: its first point's mean TPOT was "
                  f"{drift['first_tpot_ms']:.2f} ms at the start and {drift['again_tpot_ms']:.2f} ms at the end "
                  f"({drift['change']:+.0%}); no prediction is closer than that: probe again on a quiet moment"]


def _prefix_cache_notes(observed: list[Observed]) -> list[str]:
    """A note for each run whose prompts the server partly served from its prefix cache (the run's server
    block, scraped during it): the simulator computes every prompt token, so such runs make prefill look
    cheap and every prediction with new prompts too fast."""
    out: list[str] = []
    for obs in observed:
        rate = (obs.result.get("server") or {}).get("prefix_cache_hit_rate")
        if isinstance(rate, int | float) and rate > PREFIX_HIT_NOTE:
            out.append(f"run {obs.label}: the server took {rate:.0%} of its prompt tokens from the prefix cache, "
                       "which the simulator does not model; prefill is fitted too cheap (calibrate on runs with "
                       "fresh prompts)")
    return out


SPREAD_GRID = [i / 10 for i in range(0, 16)]  # log-normal sigma 0 .. 1.5, refined to 0.01 around the best
# API-server time per stream and delivery round, 0 .. 1 ms (microseconds); refined between the best's neighbours.
STREAM_GRID_US = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 175, 200, 250, 300, 400, 500,
                  700, 1000]


def fit_stream_per_seq(observed: list[Observed], engine: EngineConfig, model: StepModel,
                       traces: list[Trace]) -> float:
    """The API server's time per stream and delivery round that best reproduces the runs' mean ITL.

    A client counts one gap per chunk it receives, so a run whose streams outran the API server has a mean ITL
    above its mean TPOT (tokens per chunk = mean ITL / TPOT; 1.2-1.4 at 32-48 streams on the suite's server with
    the API server on a core of its own). The spread of gaps keeps their mean, so the mean ITL alone fits this:
    least squares of the log errors over the runs that report one."""
    targets = [(obs, tr, float(obs.result["mean_itl_ms"])) for obs, tr in zip(observed, traces, strict=True)
               if float(obs.result.get("mean_itl_ms") or 0.0) > 0]
    if not targets:
        return 0.0

    def error(us: float) -> float:
        trial = model.model_copy(update={"stream_per_seq_s": us * 1e-6, "itl_spread": 0.0})
        err = 0.0
        for obs, tr, measured in targets:
            sim = summarize(tr, obs.load, obs.engine or engine, trial, percentiles=[50.0])
            if sim["mean_itl_ms"] <= 0:
                return math.inf
            err += math.log(sim["mean_itl_ms"] / measured) ** 2
        return err

    grid = STREAM_GRID_US
    k = min(range(len(grid)), key=lambda j: error(grid[j]))
    lo, hi = grid[max(0, k - 1)], grid[min(len(grid) - 1, k + 1)]
    fine = [lo + (hi - lo) * j / 20 for j in range(21)]
    return min(fine, key=error) * 1e-6


def fit_itl_spread(observed: list[Observed], engine: EngineConfig, model: StepModel,
                   traces: list[Trace] | None = None) -> float:
    """The log-normal spread of delivered token gaps that best reproduces the runs' median and p90 ITL.

    The step model sets the mean gap; how unevenly the client receives tokens (API server, network
    stack and client sharing the host) is fitted here, on the same runs, by least squares of the log
    errors of both percentiles over a grid of sigmas. `traces`, when given, are the runs simulated with `model`."""
    targets: list[tuple[Observed, Trace, float, float]] = []
    for i, obs in enumerate(observed):
        p50, p90 = obs.result.get("median_itl_ms"), obs.result.get("p90_itl_ms")
        if not p50 or not p90 or float(p50) <= 0 or float(p90) <= 0:
            continue  # a run whose tokens arrived in bursts has no median gap to fit
        tr = traces[i] if traces is not None else run(obs.engine or engine, model, obs.load)
        targets.append((obs, tr, float(p50), float(p90)))
    if not targets:
        return 0.0

    def error(sigma: float) -> float:
        return _percentile_error(targets, engine, model.model_copy(update={"itl_spread": sigma}), "itl", ratio=False)

    coarse = min(SPREAD_GRID, key=error)
    fine = [max(0.0, coarse + i / 100) for i in range(-10, 11)]
    return min(fine, key=error)


TPOT_SPREAD_GRID = [i / 50 for i in range(0, 31)]  # log-normal sigma 0 .. 0.6


def fit_tpot_spread(observed: list[Observed], engine: EngineConfig, model: StepModel, traces: list[Trace]) -> float:
    """The log-normal spread of each request's decode time that best reproduces the runs' p90 over median TPOT.

    The simulated steps are deterministic, so requests decoding side by side get nearly one TPOT; on the suite's CPU
    server their p90 was 1.1-1.3 times their median in every kind of load, as the host's speed moves over a
    request's life. Least squares of the log error of that ratio over a grid of sigmas: the ratio, not the two
    percentiles, so that a fit whose TPOT level is off does not take the spread for it (62 misses against 61 over
    the sixteen saved runs of 2026-12-07)."""
    targets = [(obs, tr, float(obs.result.get("median_tpot_ms") or 0.0), float(obs.result.get("p90_tpot_ms") or 0.0))
               for obs, tr in zip(observed, traces, strict=True)]
    targets = [t for t in targets if t[2] > 0 and t[3] > 0]
    if not targets:
        return 0.0

    def error(sigma: float) -> float:
        return _percentile_error(targets, engine, model.model_copy(update={"tpot_spread": sigma}), "tpot", ratio=True)

    return min(TPOT_SPREAD_GRID, key=error)


def _percentile_error(targets: list[tuple[Observed, Trace, float, float]], engine: EngineConfig, trial: StepModel,
                      metric: str, *, ratio: bool) -> float:
    """Sum over the runs (observed, trace, measured median, measured p90) of the squared log errors of `trial`'s
    median and p90 of `metric` (ratio: of its p90 over median instead); inf where a simulated percentile is 0."""
    err = 0.0
    for obs, tr, p50, p90 in targets:
        sim = summarize(tr, obs.load, obs.engine or engine, trial, percentiles=[50.0, 90.0])
        s50, s90 = sim[f"median_{metric}_ms"], sim[f"p90_{metric}_ms"]
        if s50 <= 0 or s90 <= 0:
            return math.inf
        err += math.log(s90 / s50 / (p90 / p50)) ** 2 if ratio else math.log(s50 / p50) ** 2 + math.log(s90 / p90) ** 2
    return err


RESIDUAL_METRICS = ("request_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms", "p90_ttft_ms",
                    "p90_tpot_ms", "p90_itl_ms")
FIT_SCORE_METRICS = ("request_throughput", "median_ttft_ms", "median_tpot_ms", "p90_ttft_ms")


def max_residual(cal: Calibration, quantities: list[str]) -> float | None:
    """The largest residual on the given quantities (ttft, tpot, itl, e2el, throughput), else on anything fitted:
    a prediction of TTFT is no closer than the fit's TTFT, whatever the fit made of bursty token streams."""
    own = [abs(r.relative_error) for r in cal.residuals if any(q in r.metric for q in quantities)]
    return max(own) if own else cal.max_abs_relative_error


def residuals(cal: Calibration, observed: list[Observed], metrics: tuple[str, ...] = RESIDUAL_METRICS,
              traces: list[Trace] | None = None) -> list[Residual]:
    out: list[Residual] = []
    for i, obs in enumerate(observed):
        eng = obs.engine or cal.engine
        tr = traces[i] if traces is not None else run(eng, cal.step_model, obs.load)
        sim = summarize(tr, obs.load, eng, cal.step_model, percentiles=[50.0, 90.0])
        for metric in metrics:
            measured = obs.result.get(metric)
            if not measured:
                continue
            fitted = float(sim[metric])
            out.append(Residual(run=obs.label, metric=metric, measured=float(measured), fitted=fitted,
                                relative_error=(fitted - float(measured)) / float(measured)))
    return out


async def probe(url: str, *, points: list[ProbePoint] | None = None, model: str | None = None,
                serve_flags: dict[str, str] | None = None, confirm: bool = False,
                save_result: str | None = None, seed: int | None = None,
                ) -> tuple[list[Observed], EngineConfig, dict[str, Any]]:
    """Run the probe loads with run_benchmark (same target policy and confirmation) and return the runs.

    Point i's prompts come from seed + i. Without a seed every probe draws fresh prompts: a probe that
    repeated an earlier one's prompts would find their prefixes in the server's prefix cache and fit
    prefill costs far below what new prompts pay (seen on the suite's server: 75 % of a repeated probe's
    prompt tokens were cache hits). The seed used is kept in the calibration's conditions."""
    plan = points or DEFAULT_PROBE
    base = seed if seed is not None else random.SystemRandom().randrange(1 << 30)
    check_target(RunBenchmarkInput(url=url, concurrency=1, confirm=confirm))
    results_root = save_result or tempfile.mkdtemp(prefix="vllm-tune-whatif-")
    observed: list[Observed] = []
    cache_config: dict[str, str] = {}
    max_model_len: int | None = None
    version: str | None = None

    def request(point: ProbePoint, seed: int, label: str, warmup: int) -> RunBenchmarkInput:
        return RunBenchmarkInput(url=url, model=model, concurrency=point.concurrency, num_prompts=point.num_prompts,
                                 input_len=point.input_len, output_len=point.output_len,
                                 range_ratio=point.range_ratio, confirm=confirm,
                                 save_result=results_root, seed=seed, warmup_requests=warmup,
                                 serve_flags=dict(serve_flags or {}), label=label)

    seeds, again_seed = probe_seed_layout(base, len(plan))
    for i, point in enumerate(plan):
        out = await run_benchmark(request(point, seeds[i], f"probe-{i}", 2 if i == 0 else 1))
        assert out.result is not None
        result = out.result.model_dump(mode="json")
        server = result.get("server") or {}
        cache_config = cache_config or dict(server.get("cache_config") or {})
        prov = result.get("provenance") or {}
        max_model_len = max_model_len or prov.get("max_model_len")
        version = version or prov.get("server_version")
        if result.get("failed"):
            raise BadInputError(f"probe run {i} had {result['failed']} failed requests; calibration needs clean runs")
        observed.append(observed_from_result(result, f"c={point.concurrency} in={point.input_len} "
                                                     f"out={point.output_len}"))
    # The host's speed can change under a probe (another job, a throttled CPU): its first point runs again at the
    # end, and how far that point's TPOT moved is kept (not fitted): no prediction is closer than that.
    again = await run_benchmark(request(plan[0], again_seed, "probe-0-again", 1))
    engine = engine_from(cache_config, serve_flags, max_model_len)
    conditions: dict[str, Any] = {
        "url": url, "server_version": version, "model": model, "date": datetime.now(UTC).isoformat(),
        "points": [p.model_dump() for p in plan], "seed": base, "results_dir": results_root,
        "serve_flags": dict(serve_flags or {})}
    drift = probe_drift(observed[0].result, again.result.model_dump(mode="json") if again.result is not None else {})
    if drift is not None:
        conditions["probe_drift"] = drift
    return observed, engine, conditions


def probe_seed_layout(base: int, points: int, attempt: int = 0) -> tuple[list[int], int]:
    """The seeds of a probe's points and of its first point's repeat, for the probe taken `attempt` times before
    it: each starts after the last one's, so none repeats another's prompts (the prefix cache would serve them)."""
    start = base + attempt * (points + 1)
    return [start + i for i in range(points)], start + points


def probe_drift(first: dict[str, Any], again: dict[str, Any]) -> dict[str, float] | None:
    """How far a probe's first point moved between its run at the start and its repeat at the end (mean TPOT)."""
    before, after = float(first.get("mean_tpot_ms") or 0.0), float(again.get("mean_tpot_ms") or 0.0)
    if before <= 0 or after <= 0:
        return None
    return {"first_tpot_ms": before, "again_tpot_ms": after, "change": after / before - 1}


def _drift_size(conditions: dict[str, Any]) -> float:
    drift = conditions.get("probe_drift")
    return abs(float(drift.get("change") or 0.0)) if isinstance(drift, dict) else 0.0


async def probe_steadily(url: str, *, seed: int | None = None, retries: int = 1, **kwargs: Any,
                         ) -> tuple[list[Observed], EngineConfig, dict[str, Any]]:
    """probe(), and when the host's speed moved more than PROBE_DRIFT_NOTE under it, probe again (at most `retries`
    times, fresh prompts) and keep the probe that moved least; every probe's drift stays in the conditions.

    On the suite's 2-core VM a probe's first point once ran twice as slow at its start as at its end (drift -50 %)
    and every prediction from that calibration came out too slow by 35-60 %; in two accuracy runs (CI and local,
    2026-12-07) the cases whose probes moved 24-83 % carried 5 of 12 and 7 of 11 misses."""
    base = seed if seed is not None else random.SystemRandom().randrange(1 << 30)
    plan = kwargs.get("points") or DEFAULT_PROBE
    best = await probe(url, seed=base, **kwargs)
    drifts = [best[2].get("probe_drift")]
    for k in range(1, retries + 1):
        if _drift_size(best[2]) <= PROBE_DRIFT_NOTE:
            break
        tried = await probe(url, seed=probe_seed_layout(base, len(plan), k)[0][0], **kwargs)
        drifts.append(tried[2].get("probe_drift"))
        if _drift_size(tried[2]) < _drift_size(best[2]):
            best = tried
    best[2]["probe_drifts"] = drifts
    return best


async def calibrate_by_probe(url: str, **kwargs: Any) -> Calibration:
    observed, engine, conditions = await probe_steadily(url, **kwargs)
    return fit(observed, engine, source="probe", conditions=conditions)


def calibrate_from_results(paths: list[str], *, serve_flags: dict[str, str] | None = None,
                           engine: EngineConfig | None = None,
                           run_flags: list[dict[str, str]] | None = None) -> Calibration:
    """Fit on saved run_benchmark results (result.json files or run directories); sends nothing.

    Each run is simulated with the scheduler flags it recorded (runs of servers started with other
    --max-num-seqs or --max-num-batched-tokens calibrate one step model); `run_flags[i]`, when given,
    overrides what run i recorded, and `serve_flags` what every run recorded. The calibration's engine is
    the first run's."""
    observed: list[Observed] = []
    per_run: list[dict[str, str]] = []
    first_cache: dict[str, str] = {}
    first_len: int | None = None
    if run_flags is not None and len(run_flags) != len(paths):
        raise BadInputError("run_flags needs one set of flags per result")
    for i, p in enumerate(paths):
        result = read_result(p)
        obs = observed_from_result(result, Path(p).stem if Path(p).is_file() else Path(p).name)
        cache_config = dict((result.get("server") or {}).get("cache_config") or {})
        prov = result.get("provenance") or {}
        first_cache = first_cache or cache_config
        first_len = first_len or prov.get("max_model_len")
        recorded: dict[str, str] = {}
        for block in ("serve_flags_from_metrics", "serve_flags_from_caller"):  # the caller's win: they know more
            if isinstance(prov.get(block), dict):
                recorded.update({str(k): str(v) for k, v in prov[block].items()})
        # The flags the run recorded are the server's, unless the caller says otherwise: guessing vLLM's defaults
        # for a server that ran with --max-num-seqs 2 would fit the step times to the wrong batch sizes.
        flags = {**recorded, **(run_flags[i] if run_flags else {}), **(serve_flags or {})}
        obs.engine = engine or engine_from(cache_config or first_cache, flags, prov.get("max_model_len") or first_len)
        observed.append(obs)
        per_run.append(flags)
    if not observed:
        raise BadInputError("calibration needs at least one saved result")
    eng = observed[0].engine
    assert eng is not None
    scheduler = [{k: v for k, v in f.items() if k.lstrip("-").replace("-", "_") in SCHEDULER_FLAGS} for f in per_run]
    return fit(observed, eng, source="results",
               conditions={"results": list(paths), "serve_flags": per_run[0], "run_scheduler_flags": scheduler})


# Recorded serve flags that set a run's scheduling (what differs between runs of one calibration).
SCHEDULER_FLAGS = ("max_num_seqs", "max_num_batched_tokens", "long_prefill_token_threshold", "num_gpu_blocks_override",
                   "max_model_len")


def read_result(path: str) -> dict[str, Any]:
    """A saved run_benchmark result (a result.json or its run folder), read within the caller's file roots."""
    p = allowed(path, "result")
    if p.is_dir():
        p = p / "result.json"
    try:
        data = json.loads(read_text(p, limit=MAX_RESULT_BYTES, what="result"))
    except ValueError:
        raise BadInputError(f"{path} is not a JSON result") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{path} is not a run_benchmark result")
    return data


def save(cal: Calibration, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(cal.model_dump_json(indent=2), encoding="utf-8")
    return p


def load_calibration(path: str | Path) -> Calibration:
    text = read_text(path, limit=MAX_RESULT_BYTES, what="calibration")
    try:
        return Calibration.model_validate_json(text)
    except ValueError as exc:
        raise BadInputError(f"{path} is not a what_if calibration: {str(exc).splitlines()[0]}") from None
