"""A tuning session driven by hand (the caller measures): real runs of our load generator against the
deterministic streaming server stand in for servers restarted with each trial's command."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support_bench import StreamServer, start_stream_server

from vllm_tune.cli.main import main as cli_main
from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.tune.api import tune_next, tune_record, tune_report, tune_start
from vllm_tune.tools.tune.models import RecordInput, SessionRef, TuneStartInput, TuneState, TuneWorkload

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

BASE = "vllm serve org/m --max-num-seqs 8 --max-num-batched-tokens 2048"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[StreamServer, StreamServer]]:
    # 200 ms against 10 ms to first token: a gap no busy machine closes, so the verdicts cannot flip.
    with start_stream_server(200.0, 3.0) as slow, start_stream_server(10.0, 3.0) as fast:
        yield slow, fast


async def measure(state: TuneState, url: str) -> str:
    """Run the trial's own run_benchmark arguments (from its notes) against `url`; the result path."""
    trial = next(t for t in state.trials if t.status == "proposed")
    note = next(n for n in trial.notes if n.startswith("run_benchmark arguments: "))
    args = json.loads(note.removeprefix("run_benchmark arguments: "))
    args["url"] = url
    out = await run_benchmark(RunBenchmarkInput(**args))
    assert out.result_path is not None
    return out.result_path


def start(tmp_path: Path, **kw: object) -> TuneState:
    workload = TuneWorkload(input_len=8, output_len=8, concurrency=4, num_prompts=60, warmup_requests=0)
    return tune_start(TuneStartInput(command=BASE, workload=workload, save_result=str(tmp_path), **kw))  # type: ignore[arg-type]


async def test_a_faster_trial_becomes_the_best_and_the_report_names_it(
        servers: tuple[StreamServer, StreamServer], tmp_path: Path) -> None:
    slow, fast = servers
    state = start(tmp_path, slo={"ttft": 500}, max_trials=3)
    assert (state.objective, state.better_when, state.state) == ("p99_ttft_ms", "lower", "needs-measurement")
    assert Path(state.path).is_file() and [t.id for t in state.trials] == [0]
    ref = SessionRef(session_id=state.session_id, save_result=str(tmp_path))
    assert tune_next(ref).trials == state.trials  # nothing new until trial 0 is measured

    state = tune_record(RecordInput(session_id=state.session_id, trial=0, run=await measure(state, slow.url),
                                    save_result=str(tmp_path)))
    base = state.trial(0)
    assert (base.status, base.verdict, state.best, state.state) == ("measured", "baseline", 0, "ready-for-next")
    assert base.objective is not None and base.objective > 25 and base.slo_met is True

    state = tune_next(ref)
    one = state.trials[-1]
    assert one.status == "proposed" and one.changes == {"--max-num-batched-tokens": "4096"}  # TTFT goal: prefill
    assert "lever.batched-tokens-by-goal" in one.knowledge_ids and one.derived_from == 0

    state = tune_record(RecordInput(session_id=state.session_id, trial=one.id, run=await measure(state, fast.url),
                                    save_result=str(tmp_path)))
    one = state.trial(one.id)
    assert one.verdict == "better" and state.best == one.id
    assert one.objective is not None and base.objective is not None and one.objective < base.objective - 100

    state = tune_next(ref)  # derived from the new best
    two = state.trials[-1]
    assert two.derived_from == one.id and two.changes == {"--max-num-batched-tokens": "8192"}
    state = tune_record(RecordInput(session_id=state.session_id, trial=two.id, run=await measure(state, slow.url),
                                    save_result=str(tmp_path)))
    assert state.trial(two.id).verdict == "worse" and state.best == one.id
    # Three measured trials spend the budget; a trial beat the baseline, so the baseline is measured once more.
    again = state.trials[-1]
    assert state.state == "needs-measurement" and again.confirms == 0 and again.command == BASE
    assert "not yet confirmed" in tune_report(ref).next_step
    state = tune_record(RecordInput(session_id=state.session_id, trial=again.id, run=await measure(state, slow.url),
                                    save_result=str(tmp_path)))
    assert state.state == "done" and state.trial(again.id).verdict == "confirmed"
    # How far the slow server's p99 moved between its two runs depends on the load beside them (beside
    # stress-ng: 214 -> 293 ms, "worse"); the note states it whichever way it went.
    assert state.trial(again.id).notes[-1].startswith("baseline again: p99_ttft_ms ")
    report = tune_report(ref)
    assert "best: trial 1" in report.next_step and "--max-num-batched-tokens 4096" in report.next_step
    assert "confirmed: the gain holds" in report.next_step
    assert tune_next(ref).state == "done" and len(tune_next(ref).trials) == 4  # one confirmation, never two


async def test_a_gain_that_was_drift_is_not_confirmed(
        servers: tuple[StreamServer, StreamServer], tmp_path: Path) -> None:
    # The host sped up while the trials ran: the trial "wins" (100 against 200 ms to first token), and the
    # unchanged baseline measured again does better still (10 ms). Gaps no busy machine closes.
    slow, fast = servers
    state = start(tmp_path, slo={"ttft": 500}, max_trials=2)
    ref = SessionRef(session_id=state.session_id, save_result=str(tmp_path))
    with start_stream_server(100.0, 3.0) as medium:
        await measure(state, medium.url)  # unrecorded: a fresh server's first requests are slow on a busy box
        state = tune_record(RecordInput(session_id=state.session_id, trial=0, run=await measure(state, slow.url),
                                        save_result=str(tmp_path)))
        state = tune_next(ref)
        one = state.trials[-1]
        state = tune_record(RecordInput(session_id=state.session_id, trial=one.id,
                                        run=await measure(state, medium.url), save_result=str(tmp_path)))
    assert state.best == one.id and state.trials[-1].confirms == 0, state.trial(one.id)
    state = tune_record(RecordInput(session_id=state.session_id, trial=state.trials[-1].id,
                                    run=await measure(state, fast.url), save_result=str(tmp_path)))
    again = state.trials[-1]
    assert state.state == "done" and again.verdict == "not-confirmed"
    assert "better than the first measurement" in again.notes[-1]
    assert state.confirmation is not None and state.confirmation.startswith("NOT confirmed")
    assert "NOT confirmed" in tune_report(ref).next_step


async def test_no_confirmation_when_the_baseline_stays_best_or_it_is_switched_off(
        servers: tuple[StreamServer, StreamServer], tmp_path: Path) -> None:
    slow, fast = servers
    for confirm_best, first, second in ((True, fast, slow), (False, slow, fast)):
        state = start(tmp_path, slo={"ttft": 500}, max_trials=2, confirm_best=confirm_best)
        ref = SessionRef(session_id=state.session_id, save_result=str(tmp_path))
        state = tune_record(RecordInput(session_id=state.session_id, trial=0, run=await measure(state, first.url),
                                        save_result=str(tmp_path)))
        state = tune_next(ref)
        state = tune_record(RecordInput(session_id=state.session_id, trial=state.trials[-1].id,
                                        run=await measure(state, second.url), save_result=str(tmp_path)))
        assert state.state == "done" and len(state.trials) == 2 and state.confirmation is None
        assert state.best == (0 if confirm_best else 1)


async def test_failed_and_rejected_trials_do_not_stop_the_session(
        servers: tuple[StreamServer, StreamServer], tmp_path: Path) -> None:
    slow, _ = servers
    state = tune_start(TuneStartInput(
        command="vllm serve org/m --max-num-seqs 8 --max-num-batched-tokens 1024 --max-model-len 1024 "
                "--no-enable-chunked-prefill", slo={"tpot": 50}, save_result=str(tmp_path),
        workload=TuneWorkload(input_len=8, output_len=8, concurrency=4, num_prompts=60, warmup_requests=0)))
    assert state.objective == "p99_tpot_ms"
    state = tune_record(RecordInput(session_id=state.session_id, trial=0, run=await measure(state, slow.url),
                                    save_result=str(tmp_path)))
    state = tune_next(SessionRef(session_id=state.session_id, save_result=str(tmp_path)))
    # decode goal: halving the batched-token budget would put it under max-model-len with chunked prefill off
    rejected, pending = state.trials[-2], state.trials[-1]
    assert rejected.status == "rejected" and "batched-tokens-below-max-model-len" in rejected.notes[0]
    assert pending.status == "proposed" and pending.changes == {"--max-num-seqs": "4"}
    state = tune_record(RecordInput(session_id=state.session_id, trial=pending.id, failed_reason="OOM at start",
                                    save_result=str(tmp_path)))
    assert state.trial(pending.id).status == "failed" and state.state == "ready-for-next" and state.best == 0
    with pytest.raises(BadInputError, match="only a proposed trial"):
        tune_record(RecordInput(session_id=state.session_id, trial=pending.id, failed_reason="again",
                                save_result=str(tmp_path)))


def test_bad_starts_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = TuneWorkload(concurrency=2)
    with pytest.raises(BadInputError, match="would not start"):
        tune_start(TuneStartInput(command="vllm serve org/m --max-num-sqs 8", workload=workload,
                                  save_result=str(tmp_path)))
    with pytest.raises(BadInputError, match="like a secret"):
        tune_start(TuneStartInput(command=BASE, workload=workload, env={"HF_TOKEN": "hf_x"}, save_result=str(tmp_path)))
    with pytest.raises(BadInputError, match="cannot move"):
        tune_start(TuneStartInput(command=BASE, workload=workload, levers=["--block-size"], save_result=str(tmp_path)))
    assert cli_main(["tune", "next", "tune-20260101-000000-abcdef", "--save-result", str(tmp_path)]) == 2
    assert "no tuning session" in capsys.readouterr().err
    assert cli_main(["tune", "next", "../../etc", "--save-result", str(tmp_path)]) == 2
    assert cli_main(["tune", "start", "--command", BASE, "--concurrency", "2", "--result-dir", str(tmp_path)]) == 0
    assert "needs-measurement" in capsys.readouterr().out
