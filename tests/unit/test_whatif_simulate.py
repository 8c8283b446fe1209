"""The scheduler model against hand-computed schedules, and its result against run_benchmark's shape."""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist

import pytest

from vllm_tune.tools.bench.api import BenchResult, RunBenchmarkInput
from vllm_tune.tools.bench.metrics import describe
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.whatif.results import _weighted_stats, load_from_request, summarize
from vllm_tune.tools.whatif.simulate import EngineConfig, Load, StepModel, run

STEP = StepModel(fixed_s=0.010, per_decode_seq_s=0.001, per_prefill_token_s=0.0001, request_overhead_s=0.002)


def test_single_request_times_are_the_step_sums() -> None:
    cfg = EngineConfig(num_gpu_blocks=1000)
    tr = run(cfg, STEP, Load(lens=[(100, 5)], offsets=[0.0]))
    # Ready at 2 ms (overhead): the engine is idle until then, then one prefill step of 100 tokens.
    assert tr.first[0] == pytest.approx(0.002 + 0.010 + 100 * 0.0001)
    # Four more tokens, each a decode step with one sequence.
    assert tr.last[0] - tr.first[0] == pytest.approx(4 * 0.011)
    assert tr.steps == 5


def test_chunked_prefill_splits_a_long_prompt_over_the_budget() -> None:
    cfg = EngineConfig(num_gpu_blocks=1000, max_num_batched_tokens=512, max_num_seqs=8)
    tr = run(cfg, STEP, Load(lens=[(1200, 2)], offsets=[0.0]))
    # 512 + 512 + 176 tokens: three prefill steps before the first token.
    assert tr.first[0] == pytest.approx(0.002 + 3 * 0.010 + 1200 * 0.0001)
    unchunked = run(EngineConfig(num_gpu_blocks=1000, max_num_batched_tokens=2048), STEP,
                    Load(lens=[(1200, 2)], offsets=[0.0]))
    assert unchunked.first[0] < tr.first[0]


def test_running_decodes_are_scheduled_before_a_new_prefill() -> None:
    cfg = EngineConfig(num_gpu_blocks=1000, max_num_batched_tokens=64, max_num_seqs=8)
    # Request 0 decodes; request 1 (60-token prompt) arrives later: it gets the budget left after the decode.
    tr = run(cfg, StepModel(fixed_s=0.01, request_overhead_s=0.0, per_decode_seq_s=0, per_prefill_token_s=0),
             Load(lens=[(10, 50), (64, 2)], offsets=[0.0, 0.05]))
    # Request 1 is admitted at the step boundary after 0.05 s with 63 of 64 budget tokens (1 went to the
    # decode), so its prompt takes two steps.
    admitted = math.ceil(0.05 / 0.01 - 1e-9) * 0.01
    assert tr.first[1] == pytest.approx(admitted + 2 * 0.01)


def test_max_num_seqs_caps_running_and_the_rest_queue() -> None:
    cfg = EngineConfig(num_gpu_blocks=10_000, max_num_seqs=4, max_num_batched_tokens=2048)
    load = Load(lens=[(50, 40)] * 12, concurrency=12)
    tr = run(cfg, STEP, load, sample_every_s=0.01)
    assert max(p["running"] for p in tr.timeline) == 4
    assert max(p["waiting"] for p in tr.timeline) == 8
    # Twelve requests in three waves of four.
    firsts = sorted(tr.first)
    assert firsts[4] > firsts[3] + 30 * 0.010


def test_preemption_takes_the_newest_running_request_and_everything_finishes() -> None:
    # 12 blocks of 16 tokens: three requests of 40+60 tokens (7 blocks each at the end) cannot all fit.
    cfg = EngineConfig(num_gpu_blocks=12, block_size=16, max_num_seqs=8, scheduler_reserve_full_isl=False)
    tr = run(cfg, STEP, Load(lens=[(40, 60)] * 3, offsets=[0.0, 0.0, 0.0]))
    assert tr.total_preemptions > 0
    assert tr.preemptions[0] == 0  # the oldest is never the victim under FCFS
    assert all(not math.isnan(x) for x in tr.last)
    # A preempted request recomputes, so its decode phase shows a gap much longer than a step.
    assert max(tr.odd_gaps) > 3 * max(tr.step_durations[:3])


def test_full_prompt_reservation_holds_a_chunked_prompt_back_until_it_fits() -> None:
    # A (200+200 tokens) runs; B's 1000-token prompt needs 63 of the 70 blocks but comes in 256-token chunks.
    load = Load(lens=[(200, 200), (1000, 2)], offsets=[0.0, 0.0])
    held = run(EngineConfig(num_gpu_blocks=70, block_size=16, max_num_batched_tokens=256), STEP, load)
    assert held.total_preemptions == 0
    assert held.first[1] > held.last[0]  # B waited at admission until A had finished
    eager = run(EngineConfig(num_gpu_blocks=70, block_size=16, max_num_batched_tokens=256,
                             scheduler_reserve_full_isl=False), STEP, load)
    assert eager.total_preemptions > 0  # B was admitted chunk by chunk and ran out of blocks


def test_more_kv_blocks_remove_preemptions() -> None:
    lens = [(200, 100)] * 40
    small = run(EngineConfig(num_gpu_blocks=60, block_size=16), STEP, Load(lens=lens, concurrency=16))
    big = run(EngineConfig(num_gpu_blocks=5000, block_size=16), STEP, Load(lens=lens, concurrency=16))
    assert small.total_preemptions > 0
    assert big.total_preemptions == 0


def test_closed_loop_keeps_concurrency_and_conserves_tokens() -> None:
    cfg = EngineConfig(num_gpu_blocks=10_000)
    load = Load(lens=[(30, 20)] * 50, concurrency=5)
    tr = run(cfg, STEP, load, sample_every_s=0.005)
    res = summarize(tr, load, cfg, STEP, percentiles=[50.0, 99.0])
    assert res["completed"] == 50
    assert res["total_output_tokens"] == 50 * 20
    assert max(p["running"] + p["waiting"] for p in tr.timeline) == 5
    BenchResult.model_validate(res)
    assert res["simulated"] is True


def test_weighted_itl_stats_equal_stats_of_the_expanded_list() -> None:
    values, weights, extra = [0.010, 0.030, 0.020], [3, 1, 5], [0.1, 0.005]
    expanded = [v for v, w in zip(values, weights, strict=True) for _ in range(w)] + extra
    got = _weighted_stats(values, weights, extra, [50.0, 90.0, 99.0])
    want = describe(expanded, [50.0, 90.0, 99.0])
    for key, value in want.items():
        assert got[key] == pytest.approx(value)


def test_load_from_request_spreads_lengths_as_run_benchmark_drew_them() -> None:
    # A closed loop of 8 with lengths spread by half, as run_benchmark sent it to the suite's vLLM (one warm-up request
    # first, tests/data/whatif/pinned-2026-12-07T2023, probe-3): the simulated load has each request's lengths.
    from vllm_tune.tools.whatif.accuracy import load_saved

    saved = next(r for r in load_saved(Path(__file__).resolve().parents[1] / "data" / "whatif" /
                                       "pinned-2026-12-07T2023.jsonl.gz") if r.get("label") == "probe-3")
    work = saved["provenance"]["workload"]
    req = RunBenchmarkInput(url="http://x", concurrency=8, num_prompts=saved["num_prompts"],
                            input_len=work["input_len"], output_len=work["output_len"],
                            range_ratio=work["range_ratio"], seed=work["seed"], warmup_requests=1)
    load = load_from_request(req)
    assert load.lens == list(zip(saved["input_lens"], saved["output_lens"], strict=True))
    assert len({p for p, _ in load.lens}) > 20  # spread, not input_len for all
    assert load_from_request(req.model_copy(update={"range_ratio": 0.0})).lens == [(512, 64)] * 48


def test_load_from_request_uses_run_benchmarks_schedule() -> None:
    req = RunBenchmarkInput(url="http://127.0.0.1:1", rate=10, num_prompts=30, input_len=77, output_len=9, seed=3)
    load = load_from_request(req)
    assert load.lens == [(77, 9)] * 30
    assert load.offsets is not None and len(load.offsets) == 30
    from vllm_tune.tools.bench.arrivals import rate_schedule
    assert load.offsets == rate_schedule(30, 10, seed=3)
    closed = load_from_request(RunBenchmarkInput(url="http://x", concurrency=4, num_prompts=8))
    assert closed.offsets is None and closed.concurrency == 4


def test_goodput_counts_requests_meeting_the_slo() -> None:
    cfg = EngineConfig(num_gpu_blocks=10_000, max_num_seqs=2)
    load = Load(lens=[(50, 10)] * 10, concurrency=10)
    tr = run(cfg, STEP, load)
    res = summarize(tr, load, cfg, STEP, percentiles=[50.0], slo_ms={"ttft": 100})
    meeting = sum(1 for r in range(10) if (tr.first[r] - tr.send[r]) * 1000 <= 100)
    assert 0 < meeting < 10
    assert res["request_goodput"] == pytest.approx(meeting / res["duration"])


def test_bad_configs_are_one_line_errors() -> None:
    with pytest.raises(BadInputError, match="max_num_batched_tokens"):
        run(EngineConfig(max_num_seqs=512, max_num_batched_tokens=256), STEP, Load(lens=[(1, 2)], concurrency=1))
    with pytest.raises(BadInputError, match="KV blocks"):
        run(EngineConfig(num_gpu_blocks=2, block_size=16), STEP, Load(lens=[(100, 2)], concurrency=1))


def test_larger_token_budget_lowers_ttft_for_long_prompts_under_load() -> None:
    lens = [(1500, 30)] * 60
    offsets = [i * 0.05 for i in range(60)]
    res = {}
    for mbt in (512, 4096):
        cfg = EngineConfig(num_gpu_blocks=50_000, max_num_batched_tokens=mbt)
        load = Load(lens=lens, offsets=offsets)
        res[mbt] = summarize(run(cfg, STEP, load), load, cfg, STEP, percentiles=[50.0])
    assert res[4096]["median_ttft_ms"] < res[512]["median_ttft_ms"]


def test_stream_start_floors_ttft_and_bundles_early_tokens() -> None:
    cfg = EngineConfig(num_gpu_blocks=1000)
    model = StepModel(fixed_s=0.001, per_decode_seq_s=0.0, per_prefill_token_s=0.0, stream_start_s=0.050)
    load = Load(lens=[(10, 21)] * 3, concurrency=1)
    tr = run(cfg, model, load)
    res = summarize(tr, load, cfg, model, percentiles=[50.0])
    # The engine makes all 21 tokens in 21 ms; the client sees them all at 50 ms, in one burst.
    assert res["median_ttft_ms"] == pytest.approx(50.0)
    assert res["median_tpot_ms"] == pytest.approx(0.0)
    assert res["median_itl_ms"] == pytest.approx(0.0)
    # The closed-loop client sends its next request only when it has seen the last token.
    assert tr.send[1] == pytest.approx(0.050)


def test_each_request_in_flight_lengthens_a_new_requests_hand_off() -> None:
    # Steps of a fixed 10 ms whatever the batch, so that only the hand-off differs between the two runs.
    flat = StepModel(fixed_s=0.010, per_decode_seq_s=0.0, per_prefill_token_s=0.0, request_overhead_s=0.002)
    crowded = flat.model_copy(update={"overhead_per_request_in_flight_s": 0.005})
    load = Load(lens=[(32, 20)] * 90, concurrency=9)
    cfg = EngineConfig(num_gpu_blocks=10_000)
    base, more = (summarize(run(cfg, m, load), load, cfg, m, percentiles=[50.0]) for m in (flat, crowded))
    # In a closed loop of 9 a request is sent while 8 others are in flight: 40 ms more hand-off, give or
    # take the wait for the next step boundary.
    assert more["median_ttft_ms"] - base["median_ttft_ms"] == pytest.approx(40.0, abs=10.0)
    assert crowded.hand_off_s(8) == pytest.approx(0.042)


def test_an_arrival_after_the_streaming_of_a_step_waits_no_in_flight_share() -> None:
    # 10 ms steps; one request streams from t=0 to 200 ms. The in-flight share (4 ms a stream) is spent after
    # each step's end: an arrival 2.5 ms after one waits the 1.5 ms left of it, one 6 ms after waits none. A
    # closed-loop client sends as a step ends and so waits it all (the test above).
    flat = StepModel(fixed_s=0.010, per_decode_seq_s=0.0, per_prefill_token_s=0.0,
                     overhead_per_request_in_flight_s=0.004)
    load = Load(lens=[(16, 20), (16, 2), (16, 2)], offsets=[0.0, 0.0325, 0.086])
    tr = run(EngineConfig(num_gpu_blocks=10_000), flat, load, keep_windows=True)
    # (without an intake gap a request's hand-off beyond its share is minus how late it came)
    assert (tr.others_at_send[1], tr.hand_off_extra[1]) == (1, pytest.approx(-0.0025))
    assert (tr.others_at_send[2], tr.hand_off_extra[2]) == (0, 0.0)
    closed = run(EngineConfig(num_gpu_blocks=10_000), flat, Load(lens=[(16, 20)] * 12, concurrency=3),
                 keep_windows=True)
    # Every closed-loop send after the first waits its share for every other request in flight, in full.
    assert min(closed.others_at_send[1:]) >= 1 and set(closed.hand_off_extra) == {0.0}


def test_a_request_sent_to_an_idle_server_waits_its_wake_up() -> None:
    # 10 ms steps and a 3 ms wake-up: the first request and the third (sent after the first finished) reach an idle
    # server, the second arrives while the first is in flight and waits only for the running step to end.
    waking = StepModel(fixed_s=0.010, per_decode_seq_s=0.0, per_prefill_token_s=0.0, idle_wake_s=0.003)
    load = Load(lens=[(16, 20), (16, 2), (16, 2)], offsets=[0.0, 0.005, 0.5])
    tr = run(EngineConfig(num_gpu_blocks=10_000), waking, load, keep_windows=True)
    assert tr.idle_at_send == [1, 0, 1]
    assert [round((f - s) * 1e3, 6) for s, f in zip(tr.send, tr.first, strict=True)] == [13.0, 18.0, 13.0]
    plain = run(EngineConfig(num_gpu_blocks=10_000), waking.model_copy(update={"idle_wake_s": 0.0}), load)
    assert [round((f - s) * 1e3, 6) for s, f in zip(plain.send, plain.first, strict=True)] == [10.0, 15.0, 10.0]


def test_requests_sent_at_one_instant_wait_for_each_other_and_one_sent_alone_does_not() -> None:
    # 10 ms steps, a 1 ms hand-off and 2 ms for each other request sent at the same instant. The closed loop's first
    # wave of three is sent at once: each waits 1 + 2 x 2 = 5 ms, and all three prefill in the step from 5 to 15 ms.
    # Their outputs differ (2, 3 and 4 tokens), so they finish at 25, 35 and 45 ms and the next three are sent one
    # by one, each with two others in flight and none beside it: 1 ms, then the running step's end.
    model = StepModel(fixed_s=0.010, per_decode_seq_s=0.0, per_prefill_token_s=0.0, request_overhead_s=0.001,
                      overhead_per_request_sent_alongside_s=0.002)
    load = Load(lens=[(16, 2), (16, 3), (16, 4), (16, 2), (16, 2), (16, 2)], concurrency=3)
    tr = run(EngineConfig(num_gpu_blocks=10_000), model, load, keep_windows=True)
    assert tr.alongside_at_send == [2, 2, 2, 0, 0, 0]
    assert tr.others_at_send[3:] == [2, 2, 2]
    assert [round(s * 1e3, 6) for s in tr.send] == [0.0, 0.0, 0.0, 25.0, 35.0, 45.0]
    assert [round((f - s) * 1e3, 6) for s, f in zip(tr.send, tr.first, strict=True)] == [15.0] * 3 + [20.0] * 3
    # Open-loop arrivals at different instants are never counted alongside each other; two at one instant are.
    open_loop = run(EngineConfig(num_gpu_blocks=10_000), model,
                    Load(lens=[(16, 2)] * 4, offsets=[0.0, 0.004, 0.1, 0.1]), keep_windows=True)
    assert open_loop.alongside_at_send == [0, 0, 1, 1]


def test_a_burst_of_sends_reaches_the_engine_one_intake_gap_apart() -> None:
    # 10 ms steps, a 1 ms hand-off and a 3 ms intake gap: four requests sent together reach the scheduler at 1, 4,
    # 7 and 10 ms. The first prefills alone (1-11 ms); the other three wait for that step's end and share the next.
    gapped = StepModel(fixed_s=0.010, per_decode_seq_s=0.0, per_prefill_token_s=0.0, request_overhead_s=0.001,
                       intake_gap_s=0.003)
    cfg = EngineConfig(num_gpu_blocks=10_000)
    load = Load(lens=[(16, 2)] * 4, concurrency=4)
    tr = run(cfg, gapped, load, keep_windows=True)
    assert [round((f - s) * 1e3, 6) for s, f in zip(tr.send, tr.first, strict=True)] == [11.0, 21.0, 21.0, 21.0]
    # Each waited the gaps of those before it, beyond its own hand-off: the calibration's row constants.
    assert tr.hand_off_extra == pytest.approx([0.0, 0.003, 0.006, 0.009])
    together = run(cfg, gapped.model_copy(update={"intake_gap_s": 0.0}), load)
    assert [round((f - s) * 1e3, 6) for s, f in zip(together.send, together.first, strict=True)] == [11.0] * 4
    # Arrivals further apart than the gap never queue.
    spaced = run(cfg, gapped, Load(lens=[(16, 2)] * 3, offsets=[0.0, 0.05, 0.1]), keep_windows=True)
    assert spaced.hand_off_extra == [0.0, 0.0, 0.0]


def test_a_request_behind_another_in_the_intake_queue_takes_that_requests_share() -> None:
    # With the in-flight share, the request that starts an intake queue sets the hand-off of those behind it:
    # their rows in the calibration carry its count of requests in flight, and their extra wait is the gaps.
    model = StepModel(fixed_s=0.010, per_decode_seq_s=0.0, per_prefill_token_s=0.0, request_overhead_s=0.001,
                      overhead_per_request_in_flight_s=0.002, intake_gap_s=0.003)
    tr = run(EngineConfig(num_gpu_blocks=10_000), model, Load(lens=[(16, 2)] * 3, concurrency=3),
             keep_windows=True)
    # Own hand-offs 1, 3 and 5 ms (0, 1, 2 others in flight) against the queue's 1, 4 and 7 ms.
    assert tr.others_at_send == [0, 0, 0]
    assert tr.hand_off_extra == pytest.approx([0.0, 0.003, 0.006])
    for r in range(3):
        ready = tr.send[r] + model.hand_off_s(tr.others_at_send[r], tr.idle_at_send[r]) + tr.hand_off_extra[r]
        assert ready == pytest.approx([0.001, 0.004, 0.007][r])


def test_itl_spread_keeps_the_mean_gap_and_widens_p90_as_a_log_normal() -> None:
    flat = StepModel(fixed_s=0.010, per_decode_seq_s=0.0, per_prefill_token_s=0.0)
    load = Load(lens=[(16, 200)] * 4, concurrency=4)
    cfg = EngineConfig(num_gpu_blocks=10_000)
    tr = run(cfg, flat, load)
    sigma = 0.35
    plain = summarize(tr, load, cfg, flat, percentiles=[50.0, 90.0])
    spread = summarize(tr, load, cfg, flat.model_copy(update={"itl_spread": sigma}), percentiles=[50.0, 90.0])
    assert plain["p90_itl_ms"] == pytest.approx(10.0)
    assert spread["mean_itl_ms"] == pytest.approx(plain["mean_itl_ms"], rel=1e-6)
    # Log-normal with mean 1: median exp(-s^2/2), p90 exp(1.2816 s - s^2/2); 16 quantile points approximate it.
    assert spread["median_itl_ms"] == pytest.approx(10.0 * math.exp(-sigma**2 / 2), rel=0.03)
    assert spread["p90_itl_ms"] == pytest.approx(10.0 * math.exp(1.2816 * sigma - sigma**2 / 2), rel=0.05)
    assert spread["median_ttft_ms"] == plain["median_ttft_ms"]  # only delivered gaps spread


def test_tpot_spread_keeps_each_mean_and_widens_the_tpot_and_e2el_tails_only() -> None:
    flat = StepModel(fixed_s=0.010, per_decode_seq_s=0.0, per_prefill_token_s=0.0)
    load = Load(lens=[(16, 101)] * 4, concurrency=4, request_rate="inf")
    cfg = EngineConfig(num_gpu_blocks=10_000)
    tr = run(cfg, flat, load)
    sigma = 0.2
    plain = summarize(tr, load, cfg, flat, percentiles=[50.0, 90.0], slo_ms={"tpot": 10.5})
    spread = summarize(tr, load, cfg, flat.model_copy(update={"tpot_spread": sigma}), percentiles=[50.0, 90.0],
                       slo_ms={"tpot": 10.5})
    assert plain["p90_tpot_ms"] == pytest.approx(10.0) and plain["median_tpot_ms"] == pytest.approx(10.0)
    assert spread["mean_tpot_ms"] == pytest.approx(plain["mean_tpot_ms"], rel=1e-6)
    assert spread["mean_e2el_ms"] == pytest.approx(plain["mean_e2el_ms"], rel=1e-6)
    assert spread["p90_tpot_ms"] == pytest.approx(10.0 * math.exp(1.2816 * sigma - sigma**2 / 2), rel=0.03)
    assert spread["p90_e2el_ms"] > plain["p90_e2el_ms"] + 100  # 100 decode gaps, each 1.2x longer at p90
    for same in ("median_ttft_ms", "p90_ttft_ms", "median_itl_ms", "p90_itl_ms", "request_throughput", "duration"):
        assert spread[same] == plain[same], same
    # Goodput counts each request as the share of its spread decode times within the SLO: all of them at a flat 10 ms,
    # about the log-normal's share below 1.05 of its mean (0.6 of it) when spread.
    assert plain["request_goodput"] == pytest.approx(plain["request_throughput"])
    share = NormalDist().cdf((math.log(1.05) + sigma**2 / 2) / sigma)
    throughput = plain["request_throughput"]
    assert spread["request_goodput"] == pytest.approx(share * throughput, abs=0.07 * throughput)


def test_the_null_block_is_not_for_requests() -> None:
    # vLLM's block pool keeps its first block as a null placeholder: 3 blocks hold 2 one-block requests, not 3.
    cfg = EngineConfig(num_gpu_blocks=3, block_size=16)
    assert cfg.usable_blocks == 2
    tr = run(cfg, STEP, Load(lens=[(16, 1)] * 3, offsets=[0.0] * 3))
    assert tr.first[0] == tr.first[1] < tr.first[2]  # the third waited for a block
    assert max(p["kv_cache_usage"] for p in tr.timeline) <= 1.0
    with pytest.raises(BadInputError, match="2 usable"):
        run(cfg, STEP, Load(lens=[(40, 8)], offsets=[0.0]))  # 48 tokens: 3 blocks


def test_streams_that_outrun_the_api_server_reach_clients_in_merged_chunks() -> None:
    flat = StepModel(fixed_s=0.010, per_decode_seq_s=0.0, per_prefill_token_s=0.0)
    cfg = EngineConfig(num_gpu_blocks=10_000)
    load = Load(lens=[(16, 200)] * 8, concurrency=8)
    tr = run(cfg, flat, load)
    plain = summarize(tr, load, cfg, flat, percentiles=[50.0, 90.0])
    # 8 streams x 2.5 ms = 20 ms a round against 10 ms steps: two tokens a chunk, each gap two steps long.
    merged = summarize(tr, load, cfg, flat.model_copy(update={"stream_per_seq_s": 0.0025}), percentiles=[50.0])
    assert plain["median_itl_ms"] == pytest.approx(10.0)
    assert merged["median_itl_ms"] == pytest.approx(20.0)
    assert merged["mean_itl_ms"] == pytest.approx(2 * plain["mean_itl_ms"], rel=0.02)
    # The engine's time is untouched: TPOT, TTFT and throughput are the same.
    for key in ("mean_tpot_ms", "median_ttft_ms", "request_throughput"):
        assert merged[key] == plain[key]
    # A round shorter than the step merges nothing.
    quick = summarize(tr, load, cfg, flat.model_copy(update={"stream_per_seq_s": 0.001}), percentiles=[50.0])
    assert quick["median_itl_ms"] == plain["median_itl_ms"]
