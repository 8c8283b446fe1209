"""The tuning loop orders candidate trials by what_if's predicted gain and keeps each prediction next to the
measurement. The session's runs are two real runs of the suite's CPU server (knowledge/samples/runs): the same
load at --max-num-seqs 2 (the baseline, which calibrates what_if) and at --max-num-seqs 4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_tune.cli.main import main
from vllm_tune.tools.tune.api import tune_next, tune_record, tune_report, tune_start
from vllm_tune.tools.tune.models import RecordInput, SessionRef, TuneStartInput, TuneState, TuneWorkload
from vllm_tune.tools.tune.propose import Candidate, order_by_prediction

RUNS = Path(__file__).resolve().parents[2] / "knowledge" / "samples" / "runs"
BASE = "vllm serve org/m --max-num-seqs 2 --max-num-batched-tokens 2048"


def _session(tmp_path: Path, baseline: Path) -> TuneState:
    workload = TuneWorkload(input_len=64, output_len=32, concurrency=8, num_prompts=80, warmup_requests=2, seed=11)
    state = tune_start(TuneStartInput(command=BASE, goal="latency", slo={"ttft": 60_000}, slo_percentile=99,
                                      workload=workload, vllm_version="0.32.0", save_result=str(tmp_path)))
    state = tune_record(RecordInput(session_id=state.session_id, trial=0, run=str(baseline),
                                    save_result=str(tmp_path)))
    return tune_next(SessionRef(session_id=state.session_id, save_result=str(tmp_path)))


def test_a_calibrated_prediction_reorders_the_trials_and_is_kept_next_to_the_measurement(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = _session(tmp_path / "a", RUNS / "max-num-seqs-2.json")
    one = state.trials[-1]
    # The TTFT goal's usual first move is more prefill budget; at 8 x 64-token prompts it changes nothing,
    # while two sequences at a time for eight requests is a queue: what_if puts --max-num-seqs first.
    assert one.changes == {"--max-num-seqs": "4"}
    assert "ordered by what_if's predicted gain" in one.rationale and "what_if predicts p99_ttft_ms" in one.rationale
    p = one.prediction
    assert p is not None and p.gain > 0.2 and p.uncertainty is not None and p.measured is None
    assert p.calibration_runs == [str(RUNS / "max-num-seqs-2.json")]

    state = tune_record(RecordInput(session_id=state.session_id, trial=one.id, run=str(RUNS / "max-num-seqs-4.json"),
                                    save_result=str(tmp_path / "a")))
    one = state.trial(one.id)
    p = one.prediction
    assert p is not None and one.objective is not None and p.measured == one.objective
    assert p.error == pytest.approx((p.objective - one.objective) / one.objective)
    # Held against the real run: the change went the predicted way, and the prediction lies within the bound it
    # stated (the calibration's largest TTFT residual).
    assert one.verdict == "better"
    assert p.uncertainty is not None and abs(p.error) <= p.uncertainty
    # The baseline ran every step at two sequences, so four is beyond what it can estimate: a best case, which
    # the real run bears out (its p99 TTFT no lower than predicted).
    assert p.kind == "best case" and p.error <= 0
    saved = json.loads(Path(state.path).read_text())
    assert saved["trials"][one.id]["prediction"]["objective"] == p.objective  # the session file keeps it

    report = tune_report(SessionRef(session_id=state.session_id, save_result=str(tmp_path / "a")))
    assert f"trial {one.id} {p.objective:.4g} vs {one.objective:.4g}" in report.next_step
    assert main(["tune", "report", state.session_id, "--save-result", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert f"what_if predicted {p.objective:.4g}" in out and f"measured {one.objective:.4g}" in out


def test_without_a_calibration_the_usual_order_holds_and_the_reason_says_so(tmp_path: Path) -> None:
    # The same run without the server's /metrics view: the KV cache size is unknown, so what_if cannot simulate.
    data = json.loads((RUNS / "max-num-seqs-2.json").read_text())
    data.pop("server", None)
    data["provenance"].pop("serve_flags_from_metrics", None)
    blind = tmp_path / "blind.json"
    blind.write_text(json.dumps(data))
    state = _session(tmp_path / "b", blind)
    one = state.trials[-1]
    assert one.changes == {"--max-num-batched-tokens": "4096"}  # the TTFT goal's first move, as before
    assert "the usual order of moves (what_if could not calibrate" in one.rationale
    assert one.prediction is None


def _cand(flag: str) -> Candidate:
    return Candidate(f"vllm serve m {flag} 1", {flag: "1"}, {}, flag, [])


def test_unpredicted_candidates_keep_their_order_after_the_predicted_ones() -> None:
    a, b, c, d = (_cand(f) for f in ("--a", "--b", "--c", "--d"))
    assert order_by_prediction([a, b, c, d], [None, 0.05, None, 0.30]) == [d, b, a, c]
    assert order_by_prediction([a, b], [0.101, 0.104]) == [a, b]  # within 1 %: the move order decides
