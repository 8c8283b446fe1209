"""what_if's predictions replayed on real runs of the accuracy protocol: bench/bench_whatif_accuracy.py on the suite's
vLLM 0.32.0 CPU server (a 2-core VM, 2026-12-06 and 07, A and B alternating), their 48 to 99 results each trimmed of
per-request lists (the pinned and proof runs keep each request's TTFT) and diagnoses in tests/data/whatif/
(scripts/pack_whatif_runs.py). In the three bench-* runs the engine, the API server and the client shared both cores;
in the twenty-two pinned-* runs the engine core process had a core of its own and the API server and client the other
(tests/support/cpu_split.py), as the integration test and the bench now run; proof-* holds the integration test's own
runs (seeds 200+, accuracy.saved_seed), from full scripts/check runs (12:09, 14:28, 17:48, 18:27, 21:33) and from the
test run alone (13:39; 13:58 beside idle servers). The run of 12-07 01:52 is a noisy one: its probes ran slower than
those of 12-06 (TPOT at 32 streams 3.4-5.4 ms against 2.7-3.1 in most of them) while its runs did not all (the
max_num_seqs case's run A 2.7 ms at 24 streams, as on 12-06), and most of its misses come from that; in the one of
04:55 two probes moved under the host's speed. The fit and the simulation are deterministic, so this holds a change to
the step model or the fit against the same measurements: it must not do worse on any run than the model that went in
with them (README, what_if section). Offline, with every table: bench/replay_whatif_accuracy.py FILE.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_tune.tools.whatif import accuracy, heldout
from vllm_tune.tools.whatif.accuracy import (
    CASES,
    CaseOutcome,
    evaluate_saved,
    failures,
    load_saved,
    replay_saved,
)
from vllm_tune.tools.whatif.heldout import HELDOUT_FILE, document

DATA = Path(__file__).resolve().parents[1] / "data" / "whatif"

# run: (metrics judged, misses among them at most, |p50 TTFT error| at Poisson 6 req/s at most). The Poisson miss came
# back in every shared-core run; with the in-flight share charged in full to every request it was +23 %, +25 % and
# +34 % there. Merged chunks (API server time per stream) took the pinned runs from 5 misses to 3 each (the
# concurrency-48 ITL) and added one to 1732 (its concurrency-48 p90 ITL, +41 %, fitted where the API server
# shared the engine's cores). The API server's intake queue (StepModel.intake_gap_s) took the pinned runs to 1 and 2
# misses and 1732 back to 7 (17 over the five runs to 13). A spread of each request's decode time
# (StepModel.tpot_spread) took the sixteen runs from 68 misses to 61: the chunked case's p90 TPOT direction on six of
# them and the Poisson case's p90 TPOT on 2231; 0455 gained one (below). A wake-up for requests sent to an idle server
# (StepModel.idle_wake_s, fitted where run A was Poisson at 2 req/s) took the nineteen runs from 68 to 63: the Poisson
# case's p50 and p90 TTFT directions on 1658 and 1709, a chunked-case p90 TPOT on 0513.
RUNS = {
    "bench-2026-12-06T1725.jsonl.gz": (34, 1, 0.15),
    "bench-2026-12-06T1732.jsonl.gz": (40, 7, 0.21),
    "bench-2026-12-06T1745.jsonl.gz": (37, 1, 0.30),
    "pinned-2026-12-06T2231.jsonl.gz": (41, 0, 0.15),
    "pinned-2026-12-06T2238.jsonl.gz": (40, 1, 0.10),
    "pinned-2026-12-07T0152.jsonl.gz": (34, 7, 0.10),
    # Two probes moved under the host's speed (-50 % and +83 % from start to end; each probe's first point ran again
    # at its end, so this run has 54 results): those two cases carry 8 of the 12 misses. Probes now are taken again
    # when they move beyond 15 %, which this run predates. The twelfth came with the decode-time spread: the
    # preempting case's p90 TPOT (+59 %), whose median the drifted probe already put 58 % high. With the idle
    # wake-up its Poisson p50 TTFT went from +11 % to +16 % (A's 11.2-11.4 ms at 2 req/s against B's 9.5-11.1).
    "pinned-2026-12-07T0455.jsonl.gz": (39, 12, 0.17),
    # The first run with probes taken again when they moved (three cases, -29/-24/-21 % then +4/+3/-9 %; 69 results).
    "pinned-2026-12-07T0513.jsonl.gz": (35, 2, 0.22),
    # Three runs minutes apart on a quick moment of the box (about 6 minutes each), each with a second probe taken
    # after B's runs (seeds 10 x the case's + 50000; tried as part of the calibration and not kept, so the replay
    # leaves it out: 11 misses over the three with it, 9 without). Their misses: the max_num_batched_tokens=256
    # case's p50 TTFT in two (+24 and +29 %; +42 % in the third, whose B runs differed too much to judge) and the
    # concurrency-48 median ITL in two (-23 and -25 %).
    "pinned-2026-12-07T0713.jsonl.gz": (36, 1, 0.10),
    "pinned-2026-12-07T0720.jsonl.gz": (35, 4, 0.20),
    "pinned-2026-12-07T0727.jsonl.gz": (33, 3, 0.10),
    # A quiet morning run (10:51, about 6 minutes): 5 of its 6 misses in the long-prompt case, whose calibration put
    # the cost per context token at 0 (B's ITL rose 30 % from 300- to 900-token prompts, predicted +0 %).
    "pinned-2026-12-07T1051.jsonl.gz": (34, 6, 0.10),
    # Three runs back to back that evening (16:58-17:14), whose probes also timed lone prompts of 128, 512 and 1008
    # tokens by the server's prefill histogram (seeds 10 x the case's + 70000 + i; for a cost per prefill token pair,
    # tried and not kept: 9 misses over the three with it, 7 without). The server's median TTFT at Poisson 2 req/s
    # (run A, 15 ms) was above the one at 6 req/s (12-13 ms): an idle server's wake-up, without which the Poisson
    # case's TTFT directions were wrong on two of them. Left: the chunked case's p50 TTFT (+30 to +51 %).
    "pinned-2026-12-07T1658.jsonl.gz": (42, 1, 0.10),
    "pinned-2026-12-07T1704.jsonl.gz": (42, 1, 0.10),
    "pinned-2026-12-07T1709.jsonl.gz": (42, 1, 0.10),
    # The integration test's runs from a full scripts/check (12:09-12:29, VLLM_TUNE_KEEP_WHATIF_RUNS, seeds 200+):
    # the concurrency-48 p90 TTFT (+37 %), over-predicted in each of that session's three full checks and on
    # fewer of the quiet bench runs, and the long-prompt case's median ITL (+23 %).
    "proof-2026-12-07T1209.jsonl.gz": (39, 2, 0.10),
    # The integration test alone (13:39-13:45, three cases probed twice): the concurrency-48 median and p90 ITL 59-60 %
    # low (B's tokens reached the client about three to a chunk, median ITL 12 ms against a 4.1 ms TPOT: the API server
    # fell far behind its 48 streams, which the probe's 32 did not show), the chunked case's p50 TTFT (+76 %) and the
    # preempting case's p50 TTFT, ITL and TPOT (+22 to +27 %; its B runs' throughput differed by a fifth).
    "proof-2026-12-07T1339.jsonl.gz": (39, 6, 0.10),
    # The test alone again (13:58), beside three idle vLLM servers and a Prometheus scraping one every second, as a
    # full check's session leaves them: only 27 metrics repeated; the fitted in-flight share 1.6-3.3 ms (0.3-3.0 in
    # the run alone), the concurrency-48 p90 TTFT within target (-0 %), its ITL 42 % low, the Poisson p50 TTFT +33 %.
    "proof-2026-12-07T1358.jsonl.gz": (27, 4, 0.33),
    # A full scripts/check again (14:28): the concurrency-48 throughput +22 % and TPOT -21 % (B measured 73 and 81
    # req/s at a TPOT of 5.2 and 4.8 ms, 3.9 predicted from the probe's 32 streams), the chunked case's p50 TTFT
    # (+23 %) and the direction of its p90 TPOT; the concurrency-48 p90 TTFT within target this time (+12 %).
    "proof-2026-12-07T1428.jsonl.gz": (41, 3, 0.10),
    # The next session's full check (17:48), with the decode-time spread and the idle wake-up: 2 misses, the chunked
    # case's p50 TTFT (+53 %) and the Poisson case's (+21 %); the concurrency-48 case within target on every metric.
    "proof-2026-12-07T1748.jsonl.gz": (42, 2, 0.22),
    # And the one after it (18:27), on the same model: the chunked case's p50 TTFT +80 % (B measured 25.9 ms, the
    # lowest yet) and the concurrency-48 p50 TTFT +23 %.
    "proof-2026-12-07T1827.jsonl.gz": (41, 2, 0.10),
    # Five runs back to back on a noisier evening (20:23-21:03; B's two runs differed by up to a fifth). In the first
    # three the probe's 512-token point had its lengths spread by half (range_ratio 0.5, 256-768 in / 32-96 out), so
    # that its requests were sent apart and the fit could tell a cost per request sent alongside from one per request
    # in flight (StepModel.overhead_per_request_sent_alongside_s): 11 misses over the three with that cost where it
    # fitted the runs better, 12 without, 19 with the point left out. The last two probed in lock-step as before (2
    # and 3 misses): the spread point had put the concurrency-48 and max_num_seqs cases' TTFT higher (+20 to +54 %),
    # so the probe stayed as it was. The chunked case's p50 TTFT: +45 % on 2028, 2053; +24 % on 2058.
    "pinned-2026-12-07T2023.jsonl.gz": (38, 5, 0.22),
    "pinned-2026-12-07T2028.jsonl.gz": (35, 4, 0.16),
    "pinned-2026-12-07T2033.jsonl.gz": (35, 2, 0.13),
    "pinned-2026-12-07T2053.jsonl.gz": (39, 2, 0.13),
    "pinned-2026-12-07T2058.jsonl.gz": (39, 3, 0.10),
    # The full scripts/check after the cost per request sent alongside went in (21:33, a probe that drifted -23 % in
    # the first case): 9 misses, the concurrency-48 p50 and p90 TTFT (+33, +35 %), the chunked (+29 %), Poisson (+21 %)
    # and preempting (+25 %) cases' p50 TTFT, and TPOT/ITL 22-26 % off in the max_num_seqs and preempting cases.
    "proof-2026-12-07T2133.jsonl.gz": (35, 9, 0.22),
    # Five bench runs (23:30-23:59) whose probes have a fifth point: point 1's closed loop of eight with its lengths
    # spread by half, which sends its requests apart. Fitted with it, the five took 8 misses; with the four lock-step
    # points alone, 14 (the chunked case's p50 TTFT +22 to +41 % on four of them, within target with the fifth). The
    # first two ran the five points from ten times the case's seed, the last three from accuracy.probe_base (a retake
    # of five points had reached the next case's seeds in a run not kept). Left: the chunked case's p90 TTFT, 42-44 %
    # low on 2349 and 2354, where B's closed loop fell back into waves now and then (eight requests sent together,
    # prefilled in turn: TTFTs rising 35 to 82 ms) and the simulated one stayed apart (32.5 ms each after the first
    # wave); and on 2335 the chunked case's B server ran slower than its A (TPOT 3.9 ms against 3.0 predicted).
    "pinned-2026-12-07T2330.jsonl.gz": (41, 0, 0.11),
    "pinned-2026-12-07T2335.jsonl.gz": (39, 6, 0.11),
    "pinned-2026-12-07T2344.jsonl.gz": (39, 0, 0.10),
    "pinned-2026-12-07T2349.jsonl.gz": (41, 1, 0.10),
    "pinned-2026-12-07T2354.jsonl.gz": (39, 1, 0.10),
}
SIZES = {"pinned-2026-12-07T0455.jsonl.gz": 54, "pinned-2026-12-07T0513.jsonl.gz": 69,
         "pinned-2026-12-07T0713.jsonl.gz": 89, "pinned-2026-12-07T0720.jsonl.gz": 99,
         "pinned-2026-12-07T0727.jsonl.gz": 89, "pinned-2026-12-07T1051.jsonl.gz": 64,
         "proof-2026-12-07T1209.jsonl.gz": 59, "proof-2026-12-07T1339.jsonl.gz": 69,
         "proof-2026-12-07T1358.jsonl.gz": 74, "proof-2026-12-07T1428.jsonl.gz": 59,
         "pinned-2026-12-07T1658.jsonl.gz": 72, "pinned-2026-12-07T1704.jsonl.gz": 77,
         "pinned-2026-12-07T1709.jsonl.gz": 72, "proof-2026-12-07T1748.jsonl.gz": 54,
         "proof-2026-12-07T1827.jsonl.gz": 54, "pinned-2026-12-07T2023.jsonl.gz": 64,
         "pinned-2026-12-07T2028.jsonl.gz": 59, "pinned-2026-12-07T2033.jsonl.gz": 64,
         "pinned-2026-12-07T2053.jsonl.gz": 69, "pinned-2026-12-07T2058.jsonl.gz": 64,
         "proof-2026-12-07T2133.jsonl.gz": 64, "pinned-2026-12-07T2330.jsonl.gz": 60,
         "pinned-2026-12-07T2335.jsonl.gz": 66, "pinned-2026-12-07T2344.jsonl.gz": 60,
         "pinned-2026-12-07T2349.jsonl.gz": 60, "pinned-2026-12-07T2354.jsonl.gz": 72}


@functools.cache
def _replayed(name: str) -> list[CaseOutcome]:
    """Every case of a saved run fitted and predicted with the current model (its own seeds: bench 100+, proof 200+)."""
    return replay_saved(DATA / name)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_predictions_on_a_saved_real_run_do_not_fall_back(name: str) -> None:
    judged_n, most_misses, poisson_error = RUNS[name]
    assert len(load_saved(DATA / name)) == SIZES.get(name, 48)
    outcomes = _replayed(name)
    # What the two runs of each B let be judged on that host: a property of the data, not of the model.
    assert sum(r.judgeable for oc in outcomes for r in oc.rows) == judged_n
    # Every case reached the state it exists for, in the measurement and in the prediction.
    assert not [line for line in failures(outcomes) if "expected" in line]
    misses = failures(outcomes, judgeable_only=True)
    assert len(misses) <= most_misses, misses
    poisson = next(r for oc in outcomes for r in oc.rows if "Poisson" in r.case and r.metric == "median_ttft_ms")
    assert abs(poisson.error) <= poisson_error


@pytest.mark.parametrize("name", sorted(n for n in RUNS if n.startswith("pinned") and n < "pinned-2026-12-07T07"))
def test_merged_chunks_carry_the_itl_of_48_streams(name: str) -> None:
    # 48 streams outran the API server on its own core: tokens arrived about 1.3 a chunk (mean ITL 5.6-6.1 ms against
    # a 4.3 ms TPOT). Without merged chunks the median ITL was predicted 34-36 % low on both runs. Not held on the
    # three runs of 07:13-07:27: there it came out 23-32 % low (the time per stream fitted 0 us on one of them, the
    # probe's 32 streams being the only run that merged much); kept in RUNS' bounds instead.
    results = load_saved(DATA / name)
    _cal, outcome = evaluate_saved(results, 100, CASES[0])
    itl = next(r for r in outcome.rows if r.metric == "median_itl_ms")
    assert itl.within, (itl.predicted, itl.measured)


@pytest.mark.parametrize("name", ["pinned-2026-12-06T2231.jsonl.gz", "pinned-2026-12-06T2238.jsonl.gz"])
def test_the_intake_queue_spreads_a_wave_of_48_as_the_server_did(name: str) -> None:
    # A closed loop's first wave of 48 reached vLLM's add_request 2-2.5 ms apart (bench/bench_request_path.py
    # --intake). Without the intake queue the simulated waves reached the engine at once: the concurrency-48 TTFT
    # was predicted +20 % and +27 % at p50 and +45 % at p90 on both runs.
    results = load_saved(DATA / name)
    cal, outcome = evaluate_saved(results, 100, CASES[0])
    assert cal.step_model.intake_gap_s > 0
    by = {r.metric: r for r in outcome.rows}
    assert by["median_ttft_ms"].within, by["median_ttft_ms"].error
    assert by["p90_ttft_ms"].error < 0.40


def test_the_probes_staggered_point_predicts_better_than_its_lock_step_points_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The five runs of 23:30-23:59 fitted again without the probe's fifth point (its closed loop with spread lengths,
    # the only one that sends requests apart): 14 misses against 8, the chunked case's p50 TTFT +22 to +41 % on four.
    names = sorted(n for n in RUNS if n.startswith("pinned-2026-12-07T23"))
    assert len(names) == 5

    def chunked_p50_ttft_within(outcomes: list[CaseOutcome]) -> bool:
        row = next(r for oc in outcomes for r in oc.rows if oc.case.situation == "chunked" and
                   r.metric == "median_ttft_ms")
        return row.within

    staggered = {n: _replayed(n) for n in names}
    monkeypatch.setattr(accuracy, "QUICK_PROBE", accuracy.QUICK_PROBE[:4])
    lock_step = {n: replay_saved(DATA / n) for n in names}
    assert (sum(len(failures(o, judgeable_only=True)) for o in staggered.values()) <
            sum(len(failures(o, judgeable_only=True)) for o in lock_step.values()))
    assert (sum(map(chunked_p50_ttft_within, staggered.values())) >
            sum(map(chunked_p50_ttft_within, lock_step.values())))


def test_the_steadier_of_two_probes_predicts_better_on_the_run_that_took_both() -> None:
    # On the run of 12-07 05:13 three cases probed twice (first probes moved -29, -24 and -21 %, the second +4, +3
    # and -9 %). Fitted on the first probes instead, the same runs gave 7 misses against 5, the long-prompt case's
    # TPOT +31 % against -2 %.
    results = load_saved(DATA / "pinned-2026-12-07T0513.jsonl.gz")
    size = 4 + 1  # that run's probe: four points, then its first point again
    retried = {10 * (100 + i) + size + k for i in range(len(CASES)) for k in range(size)}
    first_only = [r for r in results if int(r["provenance"]["seed"]) not in retried]
    assert len(results) - len(first_only) == 3 * size

    def misses(data: list[dict[str, Any]]) -> int:
        return len(failures([evaluate_saved(data, 100 + i, case)[1] for i, case in enumerate(CASES)],
                            judgeable_only=True))

    assert misses(results) < misses(first_only)


def test_the_ttft_split_of_the_chunked_case_shows_where_its_prediction_misses() -> None:
    # bench/replay_whatif_accuracy.py --ttft-split: the client's mean TTFT against the server's queue + prefill time,
    # beside the simulated hand-off and engine parts. On this run the part outside the engine was about 10 ms longer
    # at the default budget (a closed loop in lock-step) than at 256 (staggered), while the simulator's hand-off
    # depends on the requests in flight only: what the README names as the chunked case's systematic p50 TTFT miss.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from replay_whatif_accuracy import ttft_split

    results = load_saved(DATA / "pinned-2026-12-07T0713.jsonl.gz")
    case = CASES[4]
    cal, _ = evaluate_saved(results, 104, case)
    rows = [[float(c) for c in line.strip("|").split("|")[1:]] for line in ttft_split(results, cal, case, 104)[2:]]
    by_seed = {int(r["provenance"]["seed"]): r for r in results}
    for row, seed in zip(rows, (104, 1104, 3104, 2104), strict=True):
        ttft, inside, outside, sim_ttft, hand_off, engine = row
        server = by_seed[seed]["server"]
        assert ttft == pytest.approx(by_seed[seed]["mean_ttft_ms"], abs=0.05)
        assert inside == pytest.approx(server["server_mean_queue_time_ms"] + server["server_mean_prefill_time_ms"],
                                       abs=0.05)
        assert outside == pytest.approx(ttft - inside, abs=0.15)
        assert engine == pytest.approx(sim_ttft - hand_off, abs=0.15) and hand_off > 0
    a, b, a_again, b_again = rows
    assert min(a[2], a_again[2]) > max(b[2], b_again[2]) + 8  # measured outside: 24-25 ms against 14 ms


def test_the_ttft_shape_of_the_chunked_case_puts_measured_and_simulated_side_by_side() -> None:
    # bench/replay_whatif_accuracy.py --ttft-shape: after the closed loop's first wave, the TTFTs of B measured
    # (the pinned runs keep each request's TTFT) and simulated on the same prompts. On this run each simulated
    # request waited for one other prompt's prefill behind a hand-off the server did not take: the simulated median
    # 57 ms against the server's 35 and 44 (whatif.simplifications).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from replay_whatif_accuracy import ttft_shape

    from vllm_tune.tools.bench.metrics import percentile
    from vllm_tune.tools.whatif.accuracy import engine_updates
    from vllm_tune.tools.whatif.calibrate import observed_from_result
    from vllm_tune.tools.whatif.simulate import run

    results = load_saved(DATA / "pinned-2026-12-07T0713.jsonl.gz")
    case = CASES[4]
    cal, _ = evaluate_saved(results, 104, case)
    lines = ttft_shape(results, cal, case, 104)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]] for line in lines[2:]}
    assert list(rows) == ["A", "B", "A again", "B again"]
    b = next(r for r in results if int(r["provenance"]["seed"]) == 1104)
    later = sorted(t * 1e3 for t in b["ttfts"][case.load["concurrency"]:])
    n, measured, simulated, _means = rows["B"]
    assert int(n) == case.load["num_prompts"] - case.load["concurrency"] == len(later)
    assert [float(v) for v in measured.split(" / ")] == pytest.approx(
        [percentile(later, q) for q in (10, 50, 90)], abs=0.05)
    obs = observed_from_result(b)
    tr = run(cal.engine.model_copy(update=engine_updates(case.flags)), cal.step_model, obs.load)
    sim = sorted((f - a) * 1e3 for f, a in list(zip(tr.first, tr.send, strict=True))[case.load["concurrency"]:])
    assert [float(v) for v in simulated.split(" / ")] == pytest.approx(
        [percentile(sim, q) for q in (10, 50, 90)], abs=0.05)
    # a run saved without per-request TTFTs says so instead of printing numbers
    bare = [{k: v for k, v in r.items() if k != "ttfts"} for r in results]
    assert all("no per-request TTFTs saved" in line for line in ttft_shape(bare, cal, case, 104)[2:])


def test_the_held_out_accuracy_what_if_states_is_what_the_saved_runs_give() -> None:
    # Every what_if answer quotes knowledge/calibration/whatif-heldout.yaml (tools/whatif/heldout.py). It must be what
    # the saved runs give with the model as it is: a change to the model, or a new saved run, without
    # `python scripts/whatif_heldout.py` fails here.
    names = sorted(p.name for p in DATA.glob("*.jsonl.gz"))
    assert names == sorted(RUNS)
    stored = yaml.safe_load(HELDOUT_FILE.read_text(encoding="utf-8"))
    assert stored == document({name: _replayed(name) for name in names})
    note = heldout.note()
    assert note is not None and f"{len(names)} accuracy-protocol runs" in note
    k = stored["kinds"]["p50"]
    assert f"p50 latencies within 20% in {k['within_target']}/{k['judged']}" in note
