"""The accuracy protocol of what_if: calibrate on server A, predict (config, load) pairs B, run B for real.

Shared by bench/bench_whatif_accuracy.py and the integration test, which supply the servers (a
callable that starts `vllm serve` with extra flags and returns its URL). On a shared, noisy host every
case is measured close together in time: a short probe calibrates on A, then the reference load on A (the
reference for the direction of the change, and part of the calibration) and B run twice each, alternating
(A, B, A, B) so that a drift of the host's speed shows in both pairs rather than as a change. Each pair
says how well its measurement repeats: the measurement is the pair's mean, a metric whose B pair differs by
more than its tolerance cannot be judged against the tolerance, and a change smaller than the two pairs'
spreads together is not judged for direction; the table says so instead of hiding it.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.whatif.calibrate import (
    Calibration,
    Observed,
    ProbePoint,
    engine_from,
    fit,
    observed_from_result,
    probe_drift,
    probe_seed_layout,
    probe_steadily,
)
from vllm_tune.tools.whatif.results import load_from_request, summarize
from vllm_tune.tools.whatif.simulate import EngineConfig, run

# Targets of issue 16: p50s and throughput within 20 %, p90s within 35 %, every clear change in the right
# direction. A change smaller than NOISE_BAND in the measurement is not judged for direction.
P50_TOLERANCE = 0.20
P90_TOLERANCE = 0.35
NOISE_BAND = 0.10
METRICS = ("request_throughput", "median_ttft_ms", "median_itl_ms", "median_tpot_ms", "p90_ttft_ms",
           "p90_itl_ms", "p90_tpot_ms")
LOWER_IS_BETTER = {m: m != "request_throughput" for m in METRICS}


@dataclass
class Case:
    name: str
    flags: dict[str, str]  # server flags of B beyond A's (empty: B runs on A)
    load: dict[str, Any]  # RunBenchmarkInput fields of the load
    expect: str = ""  # "queues" or "preempts": what the case is there to exercise
    # A situation what_if warns about by this case's held-out errors (heldout.SITUATIONS), when a prediction is in it
    situation: str = ""
    # The load of run A, the reference the change is judged from (and part of the calibration): by default B's
    # own load (a change of server flags); a case that changes the load names the load it changes from.
    ref_load: dict[str, Any] | None = None

    @property
    def reference_load(self) -> dict[str, Any]:
        return self.ref_load if self.ref_load is not None else self.load


# A shorter probe than the default (five closed loops, ~190 requests) so that it can run before every case.
# Outputs are long enough that the engine, not the start of the response stream, sets each request's time.
# Four waves or more per point (the closed loop's first wave of simultaneous prefills is then not half the run):
# with two, per-sequence costs fitted on probes minutes apart differed up to 2x on the suite's 2-core host.
QUICK_PROBE = [
    ProbePoint(concurrency=2, input_len=64, output_len=64, num_prompts=24),
    ProbePoint(concurrency=8, input_len=64, output_len=128, num_prompts=48),
    ProbePoint(concurrency=32, input_len=128, output_len=96, num_prompts=128),
    ProbePoint(concurrency=8, input_len=512, output_len=64, num_prompts=48),
    # Point 1 again with lengths spread by half: its requests finish and are replaced one at a time, where the
    # others' equal lengths send them in waves, so the fit can tell a cost per request in flight from one per
    # request sent at the same instant (StepModel.overhead_per_request_sent_alongside_s).
    ProbePoint(concurrency=8, input_len=64, output_len=128, num_prompts=48, range_ratio=0.5),
]


def _pair_mean(first: float, second: float) -> float:
    return first if math.isnan(second) else (first + second) / 2


def _pair_spread(first: float, second: float) -> float:
    mean = _pair_mean(first, second)
    return abs(second - first) / mean if mean and not math.isnan(second) else math.nan


@dataclass
class Row:
    case: str
    metric: str
    reference: float  # run A (the reference load on A)
    first: float  # run B
    predicted: float
    predicted_reference: float
    repeat: float = math.nan  # the same B measured again (after A's second run)
    reference_repeat: float = math.nan  # the same A measured again (after B's first run)

    @property
    def measured(self) -> float:
        """B's measurement: the mean of its two runs."""
        return _pair_mean(self.first, self.repeat)

    @property
    def measured_reference(self) -> float:
        return _pair_mean(self.reference, self.reference_repeat)

    @property
    def repeat_spread(self) -> float:
        return _pair_spread(self.first, self.repeat)

    @property
    def reference_spread(self) -> float:
        return _pair_spread(self.reference, self.reference_repeat)

    @property
    def judgeable(self) -> bool:
        """False when B's own repeat differs by more than the tolerance: the host was too noisy to judge."""
        return math.isnan(self.repeat) or self.repeat_spread <= self.tolerance

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured if self.measured else math.nan

    @property
    def tolerance(self) -> float:
        return P90_TOLERANCE if self.metric.startswith("p90") else P50_TOLERANCE

    @property
    def within(self) -> bool:
        return abs(self.error) <= self.tolerance

    @property
    def measured_change(self) -> float:
        ref = self.measured_reference
        return (self.measured - ref) / ref if ref else math.nan

    @property
    def predicted_change(self) -> float:
        ref = self.predicted_reference
        return (self.predicted - ref) / ref if ref else math.nan

    @property
    def direction_judged(self) -> bool:
        """A clear change: beyond the noise band and beyond what the two runs of A and the two of B differ by
        together (about two standard deviations of the change of their means, for noise alike in each run)."""
        return abs(self.measured_change) >= max(NOISE_BAND, self.spread_total)

    @property
    def spread_total(self) -> float:
        return sum(0.0 if math.isnan(s) else s for s in (self.repeat_spread, self.reference_spread))

    @property
    def direction_right(self) -> bool:
        return not self.direction_judged or (self.measured_change > 0) == (self.predicted_change > 0)


@dataclass
class CaseOutcome:
    case: Case
    rows: list[Row] = field(default_factory=list)
    measured_preemptions: float = 0.0
    predicted_preemptions: int = 0
    measured_max_waiting: float = 0.0
    measuredqueue_share: float = 0.0  # server mean queue time / mean e2e latency, the larger of B's two runs
    predicted_max_waiting: float = 0.0

    @property
    def measured_queue(self) -> bool:
        # The waiting gauge is sampled once a second and can miss a short run's queue; the queue-time histogram
        # cannot: without a queue a request waits at most one engine step for admission, a small fraction of
        # its latency, while waiting for a seat costs a share of another request's whole run.
        return self.measured_max_waiting > 0 or self.measuredqueue_share >= 0.25


def predict(cal: Calibration, engine: EngineConfig, req: RunBenchmarkInput) -> dict[str, Any]:
    load = load_from_request(req)
    return summarize(run(engine, cal.step_model, load), load, engine, cal.step_model, percentiles=[50.0, 90.0])


async def measure(url: str, case: Case, seed: int, save_result: str,
                  load: dict[str, Any] | None = None) -> dict[str, Any]:
    req = RunBenchmarkInput(url=url, percentiles=[50.0, 90.0], seed=seed, save_result=save_result,
                            warmup_requests=2, label=case.name, **(case.load if load is None else load))
    out = await run_benchmark(req)
    assert out.result is not None
    return out.result.model_dump(mode="json")


StartServer = Callable[[dict[str, str]], Awaitable[str]]

# A case's four measured runs, in the order run_case takes them: name, seed offset from the case's seed, and whether
# they run on B (the case's server flags and load). evaluate_saved() and the replay's tables find them by these seeds.
RUNS_OF_A_CASE = (("A", 0, False), ("B", 1000, True), ("A again", 3000, False), ("B again", 2000, True))
B_SEED_OFFSET = RUNS_OF_A_CASE[1][1]


def results_by_seed(results: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Saved run_benchmark results by the seed their provenance records (-1 where none)."""
    return {int((r.get("provenance") or {}).get("seed") or -1): r for r in results}


@dataclass
class CaseRuns:
    """What one case measured: the probe's runs on A, run A twice and run B twice (saved results)."""

    probe: list[Observed]
    engine: EngineConfig  # A's scheduler and KV settings, as the probe found them
    conditions: dict[str, Any]
    ref: dict[str, Any]
    got: dict[str, Any]
    ref_again: dict[str, Any]
    again: dict[str, Any]


async def run_case(a_url: str, a_flags: dict[str, str], start: StartServer, case: Case, seed: int,
                   save_result: str, points: list[ProbePoint] | None = None) -> tuple[Calibration, CaseOutcome]:
    """Calibrate on A, then A and B (on a server with the case's flags) twice each, alternating; all predicted.

    Run A (the case's reference load on A: B's own load when B changes server flags, the load B changes from
    when B changes the load) joins the probe in the calibration: calibrate on run A, predict B."""
    b_url = await start(case.flags) if case.flags else a_url  # started first: its start-up is not in the window
    # Every run draws its own prompts (seeds apart): a run that repeated an earlier one's prompts would be
    # served from the prefix cache, which the simulator does not model. evaluate_saved() finds the runs by
    # these seeds.
    observed, engine, conditions = await probe_steadily(a_url, points=points or QUICK_PROBE, serve_flags=a_flags,
                                                        save_result=save_result, seed=probe_base(seed))
    # A and B alternate (A, B, A, B): the host's speed drifts over minutes on a shared machine (the same probe
    # point's TPOT 1.5-2.3 ms on the suite's 2-core VM within ten minutes), and pairs taken one after the
    # other would read a drift between them as the change from A to B. Alternated, a drift widens both
    # pairs' spreads, which the direction test and the judgeability below take into account.
    ref, got, ref_again, again = [  # one after another, in that order
        await measure(b_url if on_b else a_url, case, seed + offset, save_result,
                      load=None if on_b else case.reference_load)
        for _name, offset, on_b in RUNS_OF_A_CASE]
    return evaluate(case, seed, a_flags, CaseRuns(observed, engine, conditions, ref, got, ref_again, again))


def evaluate(case: Case, seed: int, a_flags: dict[str, str], runs: CaseRuns) -> tuple[Calibration, CaseOutcome]:
    """Fit on the probe and A's two runs (nothing of B's reaches the fit), predict A and B, compare."""
    ref, got, ref_again, again = runs.ref, runs.got, runs.ref_again, runs.again
    observed = [*runs.probe, observed_from_result(ref, "A"), observed_from_result(ref_again, "A again")]
    cal = fit(observed, runs.engine, source="probe", conditions=runs.conditions)
    url = str((ref.get("provenance") or {}).get("server_url") or "http://127.0.0.1:1")
    ref_req = RunBenchmarkInput(url=url, seed=seed, **case.reference_load)
    b_req = RunBenchmarkInput(url=url, seed=seed + B_SEED_OFFSET, **case.load)
    b_flags = {**a_flags, **case.flags}
    cache = dict((got.get("server") or {}).get("cache_config") or {})
    b_engine = engine_from(cache, b_flags, cal.engine.max_model_len) if cache else \
        cal.engine.model_copy(update=engine_updates(b_flags))
    pred_ref = predict(cal, cal.engine, ref_req)
    pred = predict(cal, b_engine, b_req)
    outcome = CaseOutcome(case)
    for metric in METRICS:
        outcome.rows.append(Row(case.name, metric, float(ref[metric]), float(got[metric]), float(pred[metric]),
                                float(pred_ref[metric]), float(again[metric]), float(ref_again[metric])))
    server = got.get("server") or {}
    outcome.measured_preemptions = float(server.get("preemptions") or 0.0)
    windows = [got.get("server") or {}, again.get("server") or {}]
    outcome.measured_max_waiting = max(float(w.get("max_waiting") or 0.0) for w in windows)
    outcome.measuredqueue_share = max(queue_share(w) for w in windows)
    outcome.predicted_preemptions = int(pred["simulation"]["preemptions"])
    outcome.predicted_max_waiting = float(pred["simulation"]["max_waiting"])
    return cal, outcome


# The first case's seed (case i uses this + i): bench/bench_whatif_accuracy.py's runs, and the integration test's
# (tests/integration/test_whatif_vllm.py), whose kept runs are saved as proof-* (scripts/pack_whatif_runs.py).
BENCH_SEED, PROOF_SEED = 100, 200


# A case's probes draw their prompts from seeds probe_base(its seed) on: room for two probes (probe_steadily's
# retake) of up to nine points before the next case's, and apart from every run's seed (the case's seed + 0 to 3000):
# a seed used twice repeats its prompts, which the prefix cache then serves. Runs saved before 2026-12-08 started at
# ten times the case's seed, room for two probes of four points (a retake of five reached the next case's seeds).
PROBE_SEED_BASE, PROBE_SEED_STRIDE, LEGACY_PROBE_SEED_STRIDE = 100_000, 20, 10


def probe_base(seed: int) -> int:
    return PROBE_SEED_BASE + PROBE_SEED_STRIDE * seed


def saved_seed(path: str | Path) -> int:
    """The first case's seed of a saved run, from its name: proof-* runs are the integration test's."""
    return PROOF_SEED if Path(path).name.startswith("proof-") else BENCH_SEED


def replay_saved(path: str | Path) -> list[CaseOutcome]:
    """Every case of a saved run (a .jsonl.gz of tests/data/whatif, or a kept folder) fitted and predicted with the
    current model, on the run's own seeds (saved_seed)."""
    results = load_saved(path)
    return [evaluate_saved(results, saved_seed(path) + i, case)[1] for i, case in enumerate(CASES)]


def load_saved(path: str | Path) -> list[dict[str, Any]]:
    """Saved run_benchmark results: every result.json under a folder, or one JSON object a line (.jsonl, .jsonl.gz)."""
    p = Path(path)
    if p.is_dir():
        return [json.loads(f.read_text(encoding="utf-8")) for f in sorted(p.rglob("result.json"))]
    data = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def evaluate_saved(results: list[dict[str, Any]], seed: int, case: Case,
                   a_flags: dict[str, str] | None = None) -> tuple[Calibration, CaseOutcome]:
    """evaluate() on the saved results of an earlier run_case (its seed picks the case's runs out of them): the
    whole protocol again, offline, for a changed model or fit."""
    by_seed = results_by_seed(results)
    # The fit takes the points QUICK_PROBE has of those the saved probe ran (runs saved before the fifth point
    # have four).
    base, saved_points = saved_probe_layout(by_seed, seed)
    used = min(saved_points, len(QUICK_PROBE))
    probe_seeds = probe_seed_layout(base, saved_points)[0][:used]
    run_seeds = [seed + offset for _name, offset, _on_b in RUNS_OF_A_CASE]
    wanted = [*probe_seeds, *run_seeds]
    missing = [s for s in wanted if s not in by_seed]
    if missing:
        raise BadInputError(f"case {case.name!r}: no saved runs with seeds {missing}")
    # As probe_steadily chose live: a second probe, where one was taken, is fitted if its first point moved less.
    conditions: dict[str, Any] = {"replayed": True}
    attempts: list[tuple[list[int], dict[str, float]]] = []
    for attempt in (0, 1):
        seeds, again = probe_seed_layout(base, saved_points, attempt)
        seeds = seeds[:used]
        drift = probe_drift(by_seed[seeds[0]], by_seed[again]) if all(s in by_seed for s in (*seeds, again)) else None
        if drift is None:
            break
        attempts.append((seeds, drift))
    if len(attempts) == 2:
        conditions["probe_drifts"] = [d for _, d in attempts]
    if attempts:
        probe_seeds, conditions["probe_drift"] = min(attempts, key=lambda a: abs(a[1]["change"]))  # ties: the first
    probes = [by_seed[s] for s in probe_seeds]
    observed = [observed_from_result(r, f"probe-{i}") for i, r in enumerate(probes)]
    cache = dict((probes[0].get("server") or {}).get("cache_config") or {})
    engine = engine_from(cache, a_flags, (probes[0].get("provenance") or {}).get("max_model_len"))
    ref, got, ref_again, b_again = (by_seed[s] for s in run_seeds)
    runs = CaseRuns(observed, engine, conditions, ref, got, ref_again, b_again)
    return evaluate(case, seed, a_flags or {}, runs)


def saved_probe_points(by_seed: dict[int, dict[str, Any]], base: int) -> int:
    """How many points the saved probe starting at seed `base` ran (its runs are labelled probe-0, probe-1, ...)."""
    n = 0
    while str((by_seed.get(base + n) or {}).get("label")) == f"probe-{n}":
        n += 1
    return n


def saved_probe_layout(by_seed: dict[int, dict[str, Any]], seed: int) -> tuple[int, int]:
    """The first seed and the number of points of the probe saved for the case with this seed: from probe_base(seed),
    or from ten times the seed for runs saved before 2026-12-08; unlabelled results take the current layout."""
    for base in (probe_base(seed), LEGACY_PROBE_SEED_STRIDE * seed):
        if points := saved_probe_points(by_seed, base):
            return base, points
    return probe_base(seed), len(QUICK_PROBE)


def calibration_line(cal: Calibration) -> str:
    """One line of a case's fitted costs and how closely they reproduce the runs they came from."""
    m = cal.step_model
    return (f"calibration fixed {m.fixed_s * 1e3:.2f} ms, {m.per_decode_seq_s * 1e3:.3f} ms/seq, "
            f"{m.per_prefill_token_s * 1e6:.1f} us/prefill token, {m.per_context_token_s * 1e9:.1f} ns/ctx, "
            f"hand-off {m.request_overhead_s * 1e3:.1f} ms + {m.overhead_per_request_in_flight_s * 1e3:.2f} "
            f"ms/request in flight + {m.overhead_per_request_sent_alongside_s * 1e3:.2f} ms/request sent alongside, "
            f"idle wake-up {m.idle_wake_s * 1e3:.1f} ms, intake gap "
            f"{m.intake_gap_s * 1e3:.1f} ms, {m.stream_per_seq_s * 1e6:.0f} us/stream a round, ITL spread "
            f"{m.itl_spread:.2f}, TPOT spread {m.tpot_spread:.2f}; residuals within "
            f"{cal.max_abs_relative_error or 0:.0%}"
            + _worst_fits(cal) + _drift_text(cal.conditions.get("probe_drift")))


def _worst_fits(cal: Calibration, count: int = 3) -> str:
    """The runs and metrics the fit reproduces worst, measured -> fitted: where a miss starts is read from them."""
    worst = sorted(cal.residuals, key=lambda r: -abs(r.relative_error))[:count]
    return "".join(f"{'; worst ' if i == 0 else ', '}{r.run} {r.metric} {r.measured:.3g} -> {r.fitted:.3g}"
                   for i, r in enumerate(worst))


def _drift_text(drift: Any) -> str:
    """How far the probe's first point moved by the probe's end (calibrate.probe repeats it), when it was measured."""
    return f"; probe drift {float(drift['change']):+.0%}" if isinstance(drift, dict) and "change" in drift else ""


def queue_share(window: dict[str, Any]) -> float:
    queue, e2e = window.get("server_mean_queue_time_ms"), window.get("server_mean_e2e_ms")
    return float(queue) / float(e2e) if queue is not None and e2e else 0.0


def engine_updates(flags: dict[str, str]) -> dict[str, Any]:
    """A case's server flags (vLLM's names, with or without dashes) as EngineConfig updates."""
    out: dict[str, Any] = {}
    for key in ("max_num_seqs", "max_num_batched_tokens", "num_gpu_blocks_override", "block_size"):
        for name in (key, "--" + key.replace("_", "-")):
            if name in flags:
                out["num_gpu_blocks" if key == "num_gpu_blocks_override" else key] = int(flags[name])
    return out


def table(outcomes: list[CaseOutcome]) -> str:
    """Markdown table: every case and metric, A's and B's two runs, predicted vs B's mean, error, tolerance,
    direction of the change from A's mean."""
    lines = ["| case | metric | A runs | B runs | B mean | predicted | error | within | change measured / predicted "
             "| dir |",
             "|---|---|---:|---:|---:|---:|---:|:-:|---:|:-:|"]
    for oc in outcomes:
        for r in oc.rows:
            direction = "ok" if r.direction_right else "WRONG"
            if not r.direction_judged:
                direction = "~"  # measured change inside the noise band
            within = ("yes" if r.within else "NO") + f" (±{r.tolerance:.0%})"
            if not r.judgeable:
                within += " noisy"
            lines.append(f"| {r.case} | {r.metric} | {r.reference:.2f}, {r.reference_repeat:.2f} | {r.first:.2f}, "
                         f"{r.repeat:.2f} | {r.measured:.2f} | {r.predicted:.2f} | "
                         f"{r.error:+.0%} | {within} | {r.measured_change:+.0%} / {r.predicted_change:+.0%} | "
                         f"{direction} |")
        lines.append(f"| {oc.case.name} | preemptions / max waiting | {oc.measured_preemptions:.0f} / "
                     f"{oc.measured_max_waiting:.0f} (queue {oc.measuredqueue_share:.0%} of e2e) | "
                     f"{oc.predicted_preemptions} / {oc.predicted_max_waiting:.0f} | | | | | | |")
    return "\n".join(lines)


def failures(outcomes: list[CaseOutcome], *, judgeable_only: bool = False) -> list[str]:
    """Every miss of the targets; with judgeable_only, leave out metrics whose measurement did not repeat."""
    out: list[str] = []
    for oc in outcomes:
        for r in oc.rows:
            if judgeable_only and not r.judgeable:
                continue
            if not r.within:
                out.append(f"{r.case} {r.metric}: predicted {r.predicted:.1f} vs measured {r.measured:.1f} "
                           f"({r.error:+.0%}, tolerance ±{r.tolerance:.0%})")
            if not r.direction_right:
                out.append(f"{r.case} {r.metric}: change measured {r.measured_change:+.0%}, predicted "
                           f"{r.predicted_change:+.0%}")
        if oc.case.expect == "preempts" and not (oc.measured_preemptions > 0 and oc.predicted_preemptions > 0):
            out.append(f"{oc.case.name}: expected preemptions (measured {oc.measured_preemptions:.0f}, "
                       f"predicted {oc.predicted_preemptions})")
        if oc.case.expect == "queues" and not (oc.measured_queue and oc.predicted_max_waiting > 0):
            out.append(f"{oc.case.name}: expected a queue (measured max waiting {oc.measured_max_waiting:.0f}, "
                       f"queue time {oc.measuredqueue_share:.0%} of e2e; predicted max waiting "
                       f"{oc.predicted_max_waiting:.0f})")
    return out


# Six (config, load) pairs that each differ from the calibration (QUICK_PROBE's closed loops at concurrency 2-32,
# prompts 64-512 tokens, plus run A) on a server with vLLM's CPU defaults 128 / 2048. The load cases reach
# beyond what calibrated them: concurrency 48 from run A's 16 (the probe's top is 32), prompts of 900 tokens
# from run A's 300 (the probe's longest is 512), Poisson 6 req/s from run A's 2.
CASES = [
    Case("concurrency 48, 192 in / 96 out", {}, {"concurrency": 48, "num_prompts": 144, "input_len": 192,
                                                 "output_len": 96},
         ref_load={"concurrency": 16, "num_prompts": 64, "input_len": 192, "output_len": 96}, situation="concurrency"),
    Case("Poisson 6 req/s, 256 in / 64 out", {}, {"rate": 6.0, "num_prompts": 90, "input_len": 256,
                                                  "output_len": 64},
         ref_load={"rate": 2.0, "num_prompts": 30, "input_len": 256, "output_len": 64}),
    Case("long prompts 900 in / 40 out, c=6", {}, {"concurrency": 6, "num_prompts": 48, "input_len": 900,
                                                   "output_len": 40},
         ref_load={"concurrency": 6, "num_prompts": 48, "input_len": 300, "output_len": 40},
         situation="longer prompts"),
    Case("max_num_seqs 6, c=24 (queues)", {"--max-num-seqs": "6"},
         {"concurrency": 24, "num_prompts": 96, "input_len": 128, "output_len": 64}, expect="queues"),
    Case("max_num_batched_tokens 256, 700 in, c=8", {"--max-num-batched-tokens": "256"},
         {"concurrency": 8, "num_prompts": 64, "input_len": 700, "output_len": 48}, situation="chunked"),
    Case("12 KV blocks, c=12 (preempts)", {"--num-gpu-blocks-override": "12"},
         {"concurrency": 12, "num_prompts": 72, "input_len": 200, "output_len": 160}, expect="preempts"),
]


SUMMARY_METRICS = ("request_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms", "p90_ttft_ms")


def summary_table(outcomes: list[CaseOutcome]) -> str:
    """One line per case: B's two runs -> predicted (error against their mean) for the headline metrics."""
    heads = ["req/s", "TTFT p50 ms", "TPOT p50 ms", "ITL p50 ms", "TTFT p90 ms"]
    lines = ["| case | " + " | ".join(heads) + " | preempt. meas/pred | judged within / judged |",
             "|---|" + "---:|" * len(heads) + "---:|---:|"]
    for oc in outcomes:
        by = {r.metric: r for r in oc.rows}
        cells = []
        for m in SUMMARY_METRICS:
            r = by[m]
            err = f"{r.error:+.0%}" if math.isfinite(r.error) else "n/a"
            cells.append(f"{r.first:.1f}, {r.repeat:.1f} → {r.predicted:.1f} {err}")
        judged = [r for r in oc.rows if r.judgeable]
        lines.append(f"| {oc.case.name} | " + " | ".join(cells) + f" | {oc.measured_preemptions:.0f}/"
                     f"{oc.predicted_preemptions} | {sum(r.within for r in judged)}/{len(judged)} |")
    return "\n".join(lines)
