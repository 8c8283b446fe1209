"""The tuning loop: start a session, propose a trial, record (or run) its measurement, report the best.

An agent drives it: tune_start measures nothing and proposes the baseline; after each measurement tune_next
proposes one lever change from the best command so far (tools/tune/propose.py). A trial is measured either by
the caller (restart the server with the trial's command, run_benchmark with the session's workload, then
tune_record) or by tune_run_trial, which starts vLLM on this machine on a loopback port, measures it and stops
it. A trial replaces the best only when compare_runs calls its objective better beyond noise and it does not
break an SLO the best met; everything measured stays in the session with its run id.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_tune.tools.bench.api import RunBenchmarkInput, RunBenchmarkOutput, run_benchmark
from vllm_tune.tools.bench.metrics import percentile_label
from vllm_tune.tools.compare.api import CompareInput, compare_runs
from vllm_tune.tools.compare.load import resolve
from vllm_tune.tools.compare.models import CandidateComparison
from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.lint.api import LintInput, lint_config
from vllm_tune.tools.lint.flags import FlagTable, load_table, pick_version
from vllm_tune.tools.net.http import SECRET_ENVS
from vllm_tune.tools.surface import say
from vllm_tune.tools.tune import predict, servers
from vllm_tune.tools.tune import session as store
from vllm_tune.tools.tune.models import (
    RecordInput,
    RunTrialInput,
    SessionRef,
    Trial,
    TrialPrediction,
    TuneStartInput,
    TuneState,
)
from vllm_tune.tools.tune.policy import check_command, check_env, looks_secret
from vllm_tune.tools.tune.propose import (
    GOAL_MOVES,
    LEVERS,
    Candidate,
    Move,
    candidates,
    default_levers,
    diagnosis_moves,
    lever_settings,
    order_by_prediction,
)

if TYPE_CHECKING:
    from vllm_tune.tools.tune.launcher import LaunchedServer

KB_LOOP = "method.tuning-loop"
_REFUSED = {"unknown", "other-release", "missing-value", "bad-choice", "bad-value"}


def _goal_key(req: TuneStartInput) -> str:
    if req.goal == "throughput":
        return "throughput"
    metric = next((k for k in ("ttft", "tpot", "e2el") if k in req.slo), "ttft")
    return "latency-ttft" if metric == "ttft" else "latency-decode"


def _objective(req: TuneStartInput) -> tuple[str, str]:
    if req.goal == "throughput":
        return ("request_goodput" if req.slo else "output_throughput"), "higher"
    metric = next((k for k in ("ttft", "tpot", "e2el") if k in req.slo), "ttft")
    return f"{percentile_label(req.slo_percentile)}_{metric}_ms", "lower"


def _lint(command: str, state: TuneState) -> tuple[str, list[str]]:
    out = lint_config(LintInput(command=command, vllm_version=state.vllm_version, gpu=state.gpu, offline=True))
    refused = [f"{p.option}: {p.detail}" for p in out.option_problems if p.problem in _REFUSED]
    refused += [f"{f.id}: {f.title}" for f in out.findings if f.severity == "critical"]
    return out.verdict, refused


def _bench_arguments(state: TuneState, trial: Trial, url: str | None) -> dict[str, Any]:
    w = state.workload
    # The lever values the trial pins, under their attribute names, recorded in the run's provenance.
    pinned = lever_settings(trial.command, load_table(_table_version(state)), state.levers)
    args: dict[str, Any] = {
        "url": url or "<the server's URL>", "endpoint": w.endpoint, "input_len": w.input_len,
        "output_len": w.output_len, "num_prompts": w.num_prompts, "warmup_requests": w.warmup_requests,
        "seed": w.seed, "slo": state.slo, "percentiles": sorted({50.0, 90.0, 99.0, state.slo_percentile}),
        "serve_flags": {flag.lstrip("-").replace("-", "_"): value for flag, value in pinned.items() if value},
        "save_result": state.save_result,
    }
    args.update({"concurrency": w.concurrency} if w.concurrency else {"rate": w.rate})
    return args


def _table_version(state: TuneState) -> str:
    return pick_version(state.vllm_version)[0]


def _confirmation_due(state: TuneState) -> bool:
    """A trial beat the baseline and nothing has measured the baseline again since."""
    if not state.confirm_best or state.best is None or any(t.confirms is not None for t in state.trials):
        return False
    base = state.trials[0]
    return base.status == "measured" and state.best != base.id


def _propose_confirmation(state: TuneState) -> None:
    # Trials are measured minutes or hours apart; a host that slowed or sped up between them (another job, a
    # clock change, a warmer GPU) reads as the lever's effect. The baseline measured once more, last, shows it.
    base, best = state.trials[0], state.trial(state.best)  # type: ignore[arg-type]
    trial = Trial(id=len(state.trials), command=base.command, changes={}, derived_from=base.id, confirms=base.id,
                  rationale=f"confirmation: the baseline measured again after the trials, so that trial {best.id}'s "
                            "gain is judged against a run of the same moment, not only one from the start",
                  knowledge_ids=[KB_LOOP, "benchmarking.noisy-neighbours"], lint=base.lint)
    trial.notes.append("run_benchmark arguments: " + json.dumps(_bench_arguments(state, trial, None)))
    state.trials.append(trial)


def _advance(state: TuneState) -> None:
    """Set state and next_step from the trials."""
    measured = [t for t in state.trials if t.status in ("measured", "failed") and t.confirms is None]
    pending = [t for t in state.trials if t.status == "proposed"]
    if not pending and len(measured) >= state.max_trials and _confirmation_due(state):
        _propose_confirmation(state)
        pending = [state.trials[-1]]
    confirmed = any(t.confirms is not None and t.status in ("measured", "failed") for t in state.trials)
    if pending:
        t = pending[0]
        state.state = "needs-measurement"
        state.next_step = say(
            mcp=f"measure trial {t.id}: either tune_run_trial (starts vLLM here with its command, measures, stops "
                f"it) or restart your server with `{t.command}`, call run_benchmark with the session workload (see "
                "the trial notes) and then tune_record with its run id",
            cli=f"measure trial {t.id}: either `vllm-tune tune run {state.session_id} --yes` (starts vLLM here, "
                f"measures, stops it) or restart your server with `{t.command}`, run `vllm-tune bench` with the "
                f"session workload (see the trial notes), then `vllm-tune tune record {state.session_id} {t.id} "
                "--run RUN_ID`")
    elif len(measured) >= state.max_trials or confirmed:
        state.state = "done"
        state.next_step = say(mcp="the trial budget is spent: read the report (tune_report)",
                              cli=f"the trial budget is spent: `vllm-tune tune report {state.session_id}`")
    else:
        state.state = "ready-for-next"
        state.next_step = say(mcp="call tune_next for the next trial",
                              cli=f"`vllm-tune tune next {state.session_id}` for the next trial")


def _load(session_id: str, save_result: str | None, *, stop_leftover: bool = True) -> TuneState:
    """The session, after stopping a trial server that outlived the vllm-tune process which started it."""
    state = store.load(session_id, save_result)
    if servers.reconcile(state, stop=stop_leftover):
        store.save(state)
    return state


def tune_start(req: TuneStartInput) -> TuneState:
    version = pick_version(req.vllm_version)[0]
    table = load_table(version)
    goal_key = _goal_key(req)
    levers = req.levers or default_levers(goal_key)
    unknown = [f for f in levers if f not in LEVERS]
    if unknown:
        raise BadInputError(f"the loop cannot move {', '.join(unknown)}; it knows {', '.join(LEVERS)}")
    if secret := [k for k in req.env if k in SECRET_ENVS or looks_secret(k)]:
        raise BadInputError(f"{', '.join(secret)} look(s) like a secret: the session file would keep it; set it in "
                            "the environment vllm-tune itself runs in, which the servers it starts inherit")
    check_env(req.env)
    check_command(req.command)
    objective, better = _objective(req)
    sid = store.new_session_id()
    path = store.session_dir(sid, req.save_result) / "session.json"
    state = TuneState(session_id=sid, path=str(path), goal=req.goal, objective=objective, better_when=better,
                      slo=dict(req.slo), slo_percentile=req.slo_percentile, workload=req.workload, levers=levers,
                      max_trials=req.max_trials, confirm_best=req.confirm_best, env=dict(req.env),
                      vllm_version=req.vllm_version, gpu=req.gpu,
                      save_result=req.save_result, knowledge_ids=[KB_LOOP, "benchmarking.ab-comparison"])
    verdict, refused = _lint(req.command, state)
    if refused:
        raise BadInputError("the base command would not start: " + "; ".join(refused[:3]))
    lever_settings(req.command, table, levers)  # reads the command once more: a malformed one fails here
    baseline = Trial(id=0, command=req.command, changes={}, rationale="baseline: the command as given",
                     knowledge_ids=[KB_LOOP], lint=verdict)
    baseline.notes.append("run_benchmark arguments: " + json.dumps(_bench_arguments(state, baseline, None)))
    state.trials.append(baseline)
    _advance(state)
    store.save(state)
    return state


def _result_of(state: TuneState, trial_id: int | None) -> dict[str, Any] | None:
    if trial_id is None:
        return None
    path = state.trial(trial_id).result_path
    if not path:
        return None
    try:
        data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data


def tune_next(ref: SessionRef) -> TuneState:
    state = _load(ref.session_id, ref.save_result)
    if state.state == "needs-measurement":
        return state  # next_step already says which trial to measure
    if state.state == "done" or state.best is None:
        if state.best is None:
            state.state = "done"
            state.next_step = "no trial could be measured; fix the base command or the workload and start again"
            store.save(state)
        return state
    table = load_table(_table_version(state))
    best = state.trial(state.best)
    goal_moves = GOAL_MOVES["throughput" if state.goal == "throughput" else
                            ("latency-ttft" if state.objective.endswith("_ttft_ms") else "latency-decode")]
    moves = diagnosis_moves(_result_of(state, state.best), state.levers)
    moves += [Move(flag, direction, f"the {state.goal} goal's usual lever", list(LEVERS[flag].knowledge_ids))
              for flag, direction in goal_moves]
    tried = [lever_settings(t.command, table, state.levers) for t in state.trials]
    found, notes = candidates(best.command, moves, state.levers, tried, table)
    found, predictions, order = _rank(state, table, best, found)
    for cand in found:
        trial = Trial(id=len(state.trials), command=cand.command, changes=cand.changes, derived_from=best.id,
                      rationale=f"{cand.rationale}; {order}", knowledge_ids=[KB_LOOP, *cand.knowledge_ids])
        trial.prediction = predictions.get(id(cand))
        if trial.prediction is not None:
            trial.rationale += f"; {predict.describe(trial.prediction, state.objective)}"
        trial.lint, refused = _lint(cand.command, state)
        if refused:
            trial.status, trial.notes = "rejected", ["would not start: " + "; ".join(refused[:3])]
            state.trials.append(trial)
            continue
        trial.notes = [*notes, "run_benchmark arguments: " + json.dumps(_bench_arguments(state, trial, None))]
        state.trials.append(trial)
        _advance(state)
        store.save(state)
        return state
    if _confirmation_due(state):
        _propose_confirmation(state)
        _advance(state)
        state.next_step = "no untried one-lever change is left from the best command; " + state.next_step
        store.save(state)
        return state
    state.state = "done"
    state.next_step = "no untried one-lever change is left from the best command: read the report (tune_report)"
    if notes:
        state.next_step += "; " + "; ".join(notes)
    store.save(state)
    return state


def _rank(state: TuneState, table: FlagTable, best: Trial, found: list[Candidate],
          ) -> tuple[list[Candidate], dict[int, TrialPrediction], str]:
    """Candidates in the order to try them, what_if's prediction per candidate (by id), and why this order."""
    if not found:
        return found, {}, ""
    sc, why = predict.calibrate(state, table)
    if sc is None or best.objective is None:
        return found, {}, f"the usual order of moves ({why})"
    preds = {id(c): p for c in found
             if (p := predict.predict(sc, state, table, best.command, best.objective, c)) is not None}
    if not preds:
        return found, {}, f"the usual order of moves (what_if simulates none of these levers; {why})"
    ranked = order_by_prediction(found, [preds[id(c)].gain if id(c) in preds else None for c in found])
    return ranked, preds, f"ordered by what_if's predicted gain ({why}); levers it cannot simulate after"


def _slo_met(state: TuneState, result: dict[str, Any]) -> bool | None:
    if not state.slo:
        return None
    label = percentile_label(state.slo_percentile)
    values = [result.get(f"{label}_{k}_ms") for k in state.slo]
    if any(not isinstance(v, int | float) for v in values):
        return None
    return all(float(v) <= state.slo[k] for k, v in zip(state.slo, values, strict=True))  # type: ignore[arg-type]


def _compare(state: TuneState, reference: Trial, candidate: Trial) -> tuple[str, list[str], CandidateComparison]:
    """The objective's verdict for `candidate` against `reference`, the blocking checks, and the comparison."""
    assert reference.result_path and candidate.result_path
    out = compare_runs(CompareInput(runs=[reference.result_path, candidate.result_path], seed=state.workload.seed,
                                    percentiles=sorted({50.0, state.slo_percentile})))
    comparison = out.comparisons[0]
    row = next((m for m in comparison.metrics if m.key == state.objective), None)
    blocking = [c.message for c in comparison.checks if c.severity == "blocking"]
    return ("not-comparable" if blocking or row is None else row.verdict), blocking, comparison


def _change(new: float | None, old: float | None) -> str:
    return f"{(new - old) / abs(old) * 100.0:+.1f} %" if new is not None and old else "n/a"


def _judge_confirmation(state: TuneState, again: Trial) -> None:
    """The baseline measured again: did it drift since the start, and does the best still beat it?"""
    base = state.trial(again.confirms)  # type: ignore[arg-type]
    best = state.trial(state.best)  # type: ignore[arg-type]
    drift, _, _ = _compare(state, base, again)
    holds, blocking, _ = _compare(state, again, best)
    again.verdict = "confirmed" if holds == "better" else "not-confirmed"
    drifted = _change(again.objective, base.objective)
    moved = "within noise of" if drift == "within-noise" else f"{drift} than" if drift in ("better", "worse") \
        else "not comparable with"
    again.notes.append(f"baseline again: {state.objective} {again.objective:.4g} vs {base.objective:.4g} at the "
                       f"start ({drifted}), {moved} the first measurement")
    if blocking:
        again.notes.append("not comparable with the best: " + "; ".join(blocking[:2]))
    gain = f"trial {best.id} {best.objective:.4g} vs {again.objective:.4g} ({_change(best.objective, again.objective)})"
    if holds == "better":
        state.confirmation = f"confirmed: the gain holds against the baseline measured again at the end ({gain})"
    else:
        state.confirmation = (f"NOT confirmed: against the baseline measured again at the end trial {best.id} is "
                              f"{holds} ({gain}); the baseline itself moved {drifted}"
                              " since the start, so the gain may be the host or the load changing between trials: "
                              "measure the two again back to back before adopting it")


def _judge(state: TuneState, trial: Trial) -> None:
    """Compare a measured trial with the best so far and promote it when it wins."""
    if state.best is None:
        trial.verdict = "baseline"
        state.best = trial.id
        return
    if trial.confirms is not None:
        _judge_confirmation(state, trial)
        return
    best = state.trial(state.best)
    trial.verdict, blocking, comparison = _compare(state, best, trial)
    if blocking:
        trial.notes.append("not comparable with the best: " + "; ".join(blocking[:2]))
    worse = [f"{m.metric} {m.statistic}" for m in comparison.metrics
             if m.verdict == "worse" and m.key != state.objective]
    if worse:
        trial.notes.append("also worse: " + ", ".join(worse[:6]))
    keeps_slo = trial.slo_met is not False or best.slo_met is False
    if trial.verdict == "better" and keeps_slo:
        state.best = trial.id
        trial.notes.append(f"new best (was trial {best.id})")
    for kid in comparison.knowledge_ids:
        if kid not in state.knowledge_ids:
            state.knowledge_ids.append(kid)


def tune_record(req: RecordInput) -> TuneState:
    state = _load(req.session_id, req.save_result)
    try:
        trial = state.trial(req.trial)
    except KeyError:
        raise BadInputError(f"session {state.session_id} has no trial {req.trial}") from None
    if trial.status != "proposed":
        raise BadInputError(f"trial {trial.id} is {trial.status}; only a proposed trial can be recorded")
    if state.server is not None and state.server.trial == trial.id:
        servers.refuse_if_running(state)
    _record_into(state, trial, run=req.run, failed_reason=req.failed_reason)
    store.save(state)
    return state


def _record_into(state: TuneState, trial: Trial, *, run: str | None = None, failed_reason: str | None = None) -> None:
    if failed_reason is not None:
        trial.status = "failed"
        trial.notes.append(f"not measured: {failed_reason}")
        if trial.confirms is not None:
            state.confirmation = f"not confirmed: the baseline's second measurement failed ({failed_reason})"
    else:
        assert run is not None
        path = resolve(run, state.save_result)
        try:
            result: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BadInputError(f"cannot read the result {path}: {exc}") from None
        value = result.get(state.objective)
        if not isinstance(value, int | float):
            raise BadInputError(f"{path} has no {state.objective}; measure with the session workload "
                                "(and its SLO, for goodput)")
        trial.status, trial.result_path = "measured", str(path)
        trial.run_id = result.get("vllm_tune", {}).get("run_id") if isinstance(result.get("vllm_tune"), dict) \
            else None
        trial.objective = float(value)
        if trial.prediction is not None:
            trial.prediction.measured = trial.objective
            trial.prediction.error = (trial.prediction.objective - trial.objective) / trial.objective \
                if trial.objective else None
        trial.slo_met = _slo_met(state, result)
        _judge(state, trial)
    _advance(state)


def tune_report(ref: SessionRef) -> TuneState:
    state = _load(ref.session_id, ref.save_result, stop_leftover=False)  # read-only: a leftover is only shown
    measured = [t for t in state.trials if t.status == "measured" and t.objective is not None]
    if state.best is not None and measured:
        best, base = state.trial(state.best), measured[0]
        if best.id != base.id and base.objective and best.objective is not None:
            state.next_step = (f"best: trial {best.id}, {state.objective} {best.objective:.4g} vs {base.objective:.4g} "
                               f"for the baseline ({_change(best.objective, base.objective)}): `{best.command}`")
        else:
            state.next_step = f"the baseline is still the best ({state.objective} {base.objective:.4g})"
    if state.confirmation:
        state.next_step += f"; {state.confirmation}"
    elif any(t.confirms is not None and t.status == "proposed" for t in state.trials):
        state.next_step += "; not yet confirmed: the baseline's second measurement is still to run"
    checked = [t for t in measured if t.prediction is not None and t.prediction.measured is not None]
    if checked:
        state.next_step += "; what_if predicted vs measured: " + ", ".join(
            f"trial {t.id} {t.prediction.objective:.4g} vs {t.objective:.4g}" for t in checked
            if t.prediction is not None)
    return state


def tune_status(ref: SessionRef) -> TuneState:
    """The session as it stands, with the trial server running for it (a leftover one is stopped first)."""
    return _load(ref.session_id, ref.save_result)


def _utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _is_baseline(state: TuneState, trial: Trial) -> bool:
    # Without a measured baseline nothing can be compared: such a trial is never given up by tune_run_trial.
    return trial.derived_from is None or state.best is None


def _kept_proposed(state: TuneState, trial: Trial, note: str, why: str) -> TuneState:
    trial.notes.append(note)
    _advance(state)
    state.next_step = say(
        mcp=f"trial {trial.id} was not measured ({why}; see its last note): fix the cause and run it again "
            "(tune_run_trial), or record it as failed (tune_record)",
        cli=f"trial {trial.id} was not measured ({why}; see its last note): fix the cause and run it again "
            f"(`vllm-tune tune run {state.session_id} --yes`), or record it as failed (`vllm-tune tune record "
            f"{state.session_id} {trial.id} --failed WHY`)")
    store.save(state)
    return state


def _start_failed(state: TuneState, trial: Trial, exc: TargetError, cancelled: bool) -> TuneState:
    from vllm_tune.tools.tune.launcher import LaunchError

    if cancelled:
        return _kept_proposed(state, trial, f"cancelled while its server was starting ({_utc()})", "it was cancelled")
    if isinstance(exc, LaunchError) or _is_baseline(state, trial):
        return _kept_proposed(state, trial, f"did not start ({_utc()}): {exc}", "it did not start")
    _record_into(state, trial, failed_reason=f"the server did not start: {exc}")
    store.save(state)
    return state


def _bench_ended(state: TuneState, trial: Trial, out: RunBenchmarkOutput | None, failure: str,
                 cancelled: bool) -> TuneState:
    if out is not None and (out.state == "cancelled" or cancelled):
        return _kept_proposed(state, trial, f"cancelled during its benchmark ({_utc()})", "it was cancelled")
    if out is not None and out.result_path is not None and out.state == "completed":
        _record_into(state, trial, run=out.result_path)
    else:
        failure = failure if out is None else f"the benchmark ended {out.state}"
        if _is_baseline(state, trial):
            return _kept_proposed(state, trial, f"not measured ({_utc()}): {failure}", "its benchmark failed")
        _record_into(state, trial, failed_reason=failure)
    store.save(state)
    return state


def _proposed_trial(state: TuneState, wanted: int | None) -> Trial:
    pending = [t for t in state.trials if t.status == "proposed"]
    try:
        trial = state.trial(wanted) if wanted is not None else (pending[0] if pending else None)
    except KeyError:
        trial = None
    if trial is None or trial.status != "proposed":
        raise BadInputError(say(mcp="no proposed trial to run; call tune_next first",
                                cli="no proposed trial to run; `vllm-tune tune next SESSION` first"))
    return trial


def tune_run_trial(req: RunTrialInput, *, cancel: threading.Event | None = None,
                   vllm_cmd: str | None = None) -> TuneState:
    """Start vLLM here with the trial's command, measure it with the session workload, stop it, record it.

    A cancelled or interrupted trial stays proposed, as does one that could not be started at all (vLLM not
    found) and a baseline that did not start or could not be measured: the next call runs it again. `vllm_cmd`
    (CLI only, never from MCP) says what stands for `vllm`; see launcher.vllm_command."""
    if not req.confirm:
        raise BadInputError(say(mcp="tune_run_trial starts vLLM on this machine and loads it: it needs "
                                    "confirm=true, given only after the user agreed",
                                cli="this starts vLLM on this machine and loads it: confirm with --yes"))
    state = _load(req.session_id, req.save_result)
    servers.refuse_if_running(state)
    trial = _proposed_trial(state, req.trial)
    # A session file edited by hand is held to the rules tune_start applied.
    check_env(state.env)
    check_command(trial.command)
    from vllm_tune.tools.tune.launcher import start_server  # subprocess machinery only when a trial runs here

    started: list[LaunchedServer] = []

    def on_spawn(server: LaunchedServer) -> None:
        started.append(server)
        state.server = servers.record_of(server, trial.id)
        store.save(state)

    def cancelled() -> bool:
        return bool(cancel and cancel.is_set())

    interrupted = False
    try:
        try:
            server = start_server(trial.command, env=state.env, log_dir=Path(state.path).parent / f"trial-{trial.id}",
                                  start_timeout_s=req.start_timeout_s, cancel=cancel, vllm_cmd=vllm_cmd,
                                  tag=f"{state.session_id}.{trial.id}.{secrets.token_hex(4)}", on_spawn=on_spawn)
        except TargetError as exc:
            state.server = None
            return _start_failed(state, trial, exc, cancelled())
        out, failure = None, ""
        try:
            args = _bench_arguments(state, trial, server.url)
            out = asyncio.run(run_benchmark(RunBenchmarkInput(**args), stop=cancelled))
        except (TargetError, BadInputError) as exc:
            failure = f"the benchmark failed: {exc}"
        finally:
            server.stop()
            state.server = None
        return _bench_ended(state, trial, out, failure, cancelled())
    except KeyboardInterrupt:
        # Ctrl-C, or SIGTERM/SIGHUP turned into it by the CLI: the trial stays proposed for the next run.
        trial.notes.append(f"interrupted before it was measured ({_utc()}); run it again")
        _advance(state)
        interrupted = True
        raise
    finally:
        for server in started:
            server.stop()
        if state.server is not None or interrupted:
            state.server = None
            store.save(state)
