"""The tuning loop end to end on the real vLLM CPU server: each trial starts `vllm serve` with its command,
is measured with the session workload and stopped; the loop moves --max-num-seqs where the queue says so."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from support.vllm_env import VLLM_CLI, ensure_vllm_python
from support.vllm_server import BASE_ENV

from vllm_tune.tools.bench.store import ResultStore
from vllm_tune.tools.tune.api import tune_next, tune_report, tune_run_trial, tune_start
from vllm_tune.tools.tune.models import RunTrialInput, SessionRef, Trial, TuneStartInput, TuneState, TuneWorkload

pytestmark = pytest.mark.integration


def _no_process_serving(model: str) -> bool:
    out = os.popen("ps -eo args").read()
    return not any(model in line and " serve " in line for line in out.splitlines())


def _server_itl_ms(results: Path, run_id: str | None) -> float | None:
    """The trial server's own mean inter-token latency over the trial's benchmark (its /metrics, scraped by it)."""
    if not run_id:
        return None
    value = (ResultStore(results).read_result(run_id).get("server") or {}).get("server_mean_itl_ms")
    return float(value) if isinstance(value, int | float) else None


def _two_trials(model: str, results: Path) -> tuple[Trial, Trial, TuneState, RunTrialInput]:
    # Two sequences at a time for eight concurrent requests: most of TTFT is queueing. Outputs long enough that
    # a round of the queue (96 engine steps) outweighs the HTTP and client time around each request, which a
    # busy CPU inflates: then doubling the seats cuts the median TTFT by rounds, a change no load beside the two
    # trials (measured a minute apart) hides, unless the host itself slows severalfold between them.
    base = f"vllm serve {model} --enforce-eager --dtype bfloat16 --max-model-len 1024 --max-num-seqs 2 --port 8000"
    state = tune_start(TuneStartInput(
        # Judged at the median: halving the queue halves it on any machine, while a p99 of a few dozen requests
        # on a busy box is noise that can hide a 2x change.
        command=base, goal="latency", slo={"ttft": 60_000}, slo_percentile=50, levers=["--max-num-seqs"],
        max_trials=2,
        workload=TuneWorkload(input_len=32, output_len=96, concurrency=8, num_prompts=48, warmup_requests=2),
        env=dict(BASE_ENV), vllm_version="0.32.0", save_result=str(results)))
    run = RunTrialInput(session_id=state.session_id, confirm=True, start_timeout_s=300, save_result=str(results))

    state = tune_run_trial(run)
    base_trial = state.trial(0)
    assert base_trial.status == "measured", base_trial.notes
    assert base_trial.run_id and base_trial.objective and base_trial.objective > 0
    assert (Path(state.path).parent / "trial-0").is_dir()  # the server's log

    state = tune_next(SessionRef(session_id=state.session_id, save_result=str(results)))
    trial = state.trials[-1]
    assert trial.changes == {"--max-num-seqs": "4"} and "--port" not in trial.changes
    assert {"lever.max-num-seqs-by-goal"} & set(trial.knowledge_ids)

    state = tune_run_trial(run)
    trial = state.trial(trial.id)
    assert trial.status == "measured", trial.notes
    return base_trial, trial, state, run


def test_two_trials_on_real_vllm(tiny_models: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = ensure_vllm_python(install=False)
    monkeypatch.setenv("VLLM_TUNE_VLLM_CMD", shlex.join([str(python), str(VLLM_CLI)]))
    model = str(tiny_models.llama)
    for attempt in range(2):
        results = tmp_path / f"attempt-{attempt}"
        base_trial, trial, state, run = _two_trials(model, results)
        # Four seats instead of two cost each step a few per cent more; beside stress-ng a trial server once ran
        # 6.8x slower per token than the baseline's a minute before (server-side ITL 33.5 vs 4.9 ms), and every
        # latency of the trial was worse; another time the trial's median TTFT was lower but the host's noise
        # left it "within-noise". Such a pair says nothing about the lever: set it up again, once.
        if trial.verdict == "better":
            break
        before, after = _server_itl_ms(results, base_trial.run_id), _server_itl_ms(results, trial.run_id)
        print(f"attempt {attempt}: {trial.verdict} (server ITL {before} -> {after} ms); measuring the pair again")
    assert trial.objective is not None and base_trial.objective is not None
    assert trial.objective < base_trial.objective, (trial.notes, base_trial.notes)
    assert trial.verdict == "better" and state.best == trial.id, trial.notes
    # The budget is spent and a trial won: the loop ends by measuring the baseline again, on real vLLM too.
    again = state.trials[-1]
    assert state.state == "needs-measurement" and again.confirms == base_trial.id
    state = tune_run_trial(run)
    again = state.trial(again.id)
    assert again.status == "measured" and state.state == "done", again.notes
    # Confirmed, unless the host sped up about twofold after the trial (server-side ITL): then the second
    # baseline may match the trial, and saying "not confirmed" is the right answer.
    then, now = _server_itl_ms(results, trial.run_id), _server_itl_ms(results, again.run_id)
    assert again.verdict == "confirmed" or (then and now and then > 1.8 * now), (again.notes, then, now)
    assert state.confirmation is not None
    assert "--max-num-seqs 4" in tune_report(SessionRef(session_id=state.session_id,
                                                        save_result=str(run.save_result))).next_step
    assert _no_process_serving(model)
