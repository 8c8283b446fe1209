"""`vllm-tune tune start|next|record|run|loop|report|status`: the tuning loop from a terminal."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_tune.cli.common import EXIT_TARGET, GOODPUT_HELP, parse_env_items, print_json, slo_from_args
from vllm_tune.cli.signals import raising_on

if TYPE_CHECKING:
    from vllm_tune.tools.tune.models import TuneState


def register(sub: Any) -> None:
    p = sub.add_parser("tune", help="agent-driven tuning loop: one lever per trial, measured, kept only if better",
                       description="Start a session from a vllm serve command, then alternate: next (propose one "
                                   "lever change), run (start vLLM here, measure, stop) or record (a run you "
                                   "measured yourself), until the budget is spent; report shows the best command. "
                                   "run and loop find vllm as --vllm-cmd, else $VLLM_TUNE_VLLM_CMD, else PATH; a "
                                   "trial server stops with vllm-tune, even when it is killed (status shows one "
                                   "still running).")
    steps = p.add_subparsers(dest="step", metavar="STEP", required=True)

    start = steps.add_parser("start", help="create a session and propose the baseline trial")
    start.add_argument("--command", dest="command_line", required=True,
                       help="the base `vllm serve ...` command; no --api-key/--hf-token values: export "
                            "VLLM_API_KEY or HF_TOKEN instead (vllm serve and the benchmark read them)")
    start.add_argument("--goal", choices=("latency", "throughput"), default="latency", help="what the loop optimises")
    start.add_argument("--slo", help="targets in ms, e.g. ttft=500,tpot=50")
    start.add_argument("--goodput", nargs="+", metavar="KEY:MS", help=GOODPUT_HELP)
    start.add_argument("--slo-percentile", type=float, default=99.0, help="percentile the SLO is judged at")
    load = start.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=int, help="closed-loop requests in flight")
    load.add_argument("--rate", type=float, help="open-loop requests per second")
    start.add_argument("--endpoint", choices=("completions", "chat"), default="completions", help="API the load uses")
    start.add_argument("--input-len", type=int, default=256, help="prompt tokens per request")
    start.add_argument("--output-len", type=int, default=128, help="output tokens per request")
    start.add_argument("--num-prompts", type=int, default=200, help="measured requests per trial")
    start.add_argument("--warmup-requests", type=int, default=4, help="unmeasured requests per trial")
    start.add_argument("--lever", action="append", default=[], help="a flag the loop may move (repeatable)")
    start.add_argument("--max-trials", type=int, default=6, help="trial budget, baseline included")
    start.add_argument("--no-confirm-best", dest="confirm_best", action="store_false",
                       help="skip the closing run that measures the baseline again when a trial beat it")
    start.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                       help="environment for the servers the loop starts (repeatable): VLLM_*, CUDA_*, NCCL_*, "
                            "HF_*, OMP_*, TORCH_* and the like; never secrets, PATH, LD_* or PYTHON*")
    start.add_argument("--vllm-version", help="release whose option table candidates are linted against")
    start.add_argument("--gpu", help="GPU type, for hardware-specific lint checks")
    _common(start)
    start.set_defaults(handler=_start)

    for name, helptext, handler in (("next", "propose the next trial", _next),
                                    ("report", "the trials and the best command", _report),
                                    ("status", "the session and the trial server running for it (a server left "
                                               "behind by a vllm-tune process that died is stopped)", _status)):
        q = steps.add_parser(name, help=helptext)
        q.add_argument("session", help="session id (tune start printed it)")
        _common(q)
        q.set_defaults(handler=handler)

    record = steps.add_parser("record", help="attach a measured run (or a failure) to a trial")
    record.add_argument("session", help="session id")
    record.add_argument("trial", type=int, help="trial number")
    what = record.add_mutually_exclusive_group(required=True)
    what.add_argument("--run", help="run id, run folder or result.json")
    what.add_argument("--failed", help="why the trial could not be measured")
    _common(record)
    record.set_defaults(handler=_record)

    runs: tuple[tuple[str, str, Callable[[argparse.Namespace], int]], ...] = (
        ("run", "start vLLM here with the pending trial, measure it, stop it", _run),
        ("loop", "run trials and propose the next until the session is done", _loop))
    for name, helptext, step in runs:
        r = steps.add_parser(name, help=helptext)
        r.add_argument("session", help="session id")
        r.add_argument("--yes", action="store_true", help="confirm: starts vLLM on this machine and loads it")
        r.add_argument("--start-timeout", type=float, default=900.0, help="seconds vLLM may take to get healthy")
        r.add_argument("--vllm-cmd", metavar="CMD",
                       help="what runs vllm, e.g. '/venv/bin/vllm' or '/venv/bin/python -m vllm.entrypoints.cli.main' "
                            "(default: $VLLM_TUNE_VLLM_CMD, else vllm on PATH)")
        _common(r)
        r.set_defaults(handler=step)


def _common(p: argparse.ArgumentParser) -> None:
    # --result-dir as `vllm-tune bench` and `vllm bench serve` name it; --save-result is the older spelling
    p.add_argument("--result-dir", "--save-result", dest="save_result", metavar="DIR",
                   help="results directory (sessions live in its tune/; default $VLLM_TUNE_RESULTS_DIR or "
                        "./vllm-tune-results)")
    p.add_argument("--json", action="store_true", help="print the session as JSON")


def _show(state: TuneState, args: argparse.Namespace) -> int:
    if args.json:
        print_json(state)
        return 0
    print(f"session {state.session_id} ({state.goal}, objective {state.objective}, {state.better_when} is better): "
          f"{state.state}")
    for t in state.trials:
        mark = "*" if t.id == state.best else " "
        value = f"{t.objective:.4g}" if t.objective is not None else "-"
        slo = "" if t.slo_met is None else ("  SLO met" if t.slo_met else "  SLO missed")
        change = ", ".join(f"{k} {v}" for k, v in t.changes.items()) or \
            ("baseline again (confirmation)" if t.confirms is not None else "baseline")
        print(f" {mark}{t.id:>2} {t.status:<9} {value:>10} {t.verdict or '':<15} {change}{slo}")
        if t.prediction is not None:
            from vllm_tune.tools.tune.predict import predicted_line

            print(f"       {predicted_line(t.prediction)}")
        for note in t.notes:
            if not note.startswith("run_benchmark arguments"):
                print(f"       {note}")
    if state.server is not None:
        from vllm_tune.tools.tune.servers import describe

        print(f"running: {describe(state.server)}")
    print(f"next: {state.next_step}")
    return 0


def _start(args: argparse.Namespace) -> int:
    from vllm_tune.tools.tune.api import tune_start
    from vllm_tune.tools.tune.models import TuneStartInput, TuneWorkload

    workload = TuneWorkload(endpoint=args.endpoint, input_len=args.input_len, output_len=args.output_len,
                            concurrency=args.concurrency, rate=args.rate, num_prompts=args.num_prompts,
                            warmup_requests=args.warmup_requests)
    state = tune_start(TuneStartInput(
        command=args.command_line, goal=args.goal, slo=slo_from_args(args),
        slo_percentile=args.slo_percentile, workload=workload, levers=args.lever, max_trials=args.max_trials,
        confirm_best=args.confirm_best, env=parse_env_items(args.env), vllm_version=args.vllm_version, gpu=args.gpu,
        save_result=args.save_result))
    return _show(state, args)


def _next(args: argparse.Namespace) -> int:
    from vllm_tune.tools.tune.api import tune_next
    from vllm_tune.tools.tune.models import SessionRef

    return _show(tune_next(SessionRef(session_id=args.session, save_result=args.save_result)), args)


def _report(args: argparse.Namespace) -> int:
    from vllm_tune.tools.tune.api import tune_report
    from vllm_tune.tools.tune.models import SessionRef

    return _show(tune_report(SessionRef(session_id=args.session, save_result=args.save_result)), args)


def _record(args: argparse.Namespace) -> int:
    from vllm_tune.tools.tune.api import tune_record
    from vllm_tune.tools.tune.models import RecordInput

    return _show(tune_record(RecordInput(session_id=args.session, trial=args.trial, run=args.run,
                                         failed_reason=args.failed, save_result=args.save_result)), args)


def _status(args: argparse.Namespace) -> int:
    from vllm_tune.tools.tune.api import tune_status
    from vllm_tune.tools.tune.models import SessionRef

    return _show(tune_status(SessionRef(session_id=args.session, save_result=args.save_result)), args)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C would be, so the same clean-up runs (the trial server stops and the
    trial stays proposed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _terminate_like_interrupt() -> contextlib.AbstractContextManager[None]:
    return raising_on((signal.SIGTERM, signal.SIGHUP), Terminated, once=True)


def _starting_servers(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            with _terminate_like_interrupt():
                return handler(args)
        except Terminated as exc:
            print(f"vllm-tune: stopped by {signal.Signals(exc.signum).name}: the trial server was stopped and the "
                  f"trial left to run again (`vllm-tune tune run {args.session} --yes`)", file=sys.stderr)
            # The server is stopped and the session saved. Exit now: the interpreter's normal exit joins every
            # worker thread, and one still blocked on I/O of the interrupted benchmark (a scrape or a name
            # lookup on a starved host) kept a terminated process alive for minutes beside stress-ng.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + exc.signum)

    return run


def _pending(args: argparse.Namespace) -> int | None:
    from vllm_tune.tools.tune.api import tune_status
    from vllm_tune.tools.tune.models import SessionRef

    state = tune_status(SessionRef(session_id=args.session, save_result=args.save_result))
    return next((t.id for t in state.trials if t.status == "proposed"), None)


def _run_one(args: argparse.Namespace, trial: int | None) -> TuneState:
    from vllm_tune.tools.tune.api import tune_run_trial
    from vllm_tune.tools.tune.models import RunTrialInput

    return tune_run_trial(RunTrialInput(session_id=args.session, trial=trial, confirm=args.yes,
                                        start_timeout_s=args.start_timeout, save_result=args.save_result),
                          vllm_cmd=args.vllm_cmd)


def _unmeasured(state: TuneState, trial: int | None, args: argparse.Namespace) -> int:
    """Exit status after a run: 0 when the trial got an outcome, EXIT_TARGET when it is still waiting."""
    if trial is None or state.trial(trial).status != "proposed":
        return 0
    if not args.json:
        print(f"vllm-tune: error: trial {trial} was not measured: {state.trial(trial).notes[-1]}", file=sys.stderr)
    return EXIT_TARGET


@_starting_servers
def _run(args: argparse.Namespace) -> int:
    if not args.yes:
        from vllm_tune.tools.errors import BadInputError

        raise BadInputError("tune run starts vLLM on this machine and loads it: add --yes to confirm")
    trial = _pending(args)
    if trial is None:
        from vllm_tune.tools.errors import BadInputError

        raise BadInputError(f"no trial waits for measurement: run `vllm-tune tune next {args.session}` first")
    state = _run_one(args, trial)
    code = _show(state, args)
    return _unmeasured(state, trial, args) or code


@_starting_servers
def _loop(args: argparse.Namespace) -> int:
    from vllm_tune.tools.tune.api import tune_next, tune_report
    from vllm_tune.tools.tune.models import SessionRef

    if not args.yes:
        from vllm_tune.tools.errors import BadInputError

        raise BadInputError("tune loop starts vLLM on this machine and loads it: add --yes to confirm")
    ref = SessionRef(session_id=args.session, save_result=args.save_result)
    state = tune_next(ref)
    while state.state != "done":
        if state.state == "needs-measurement":
            trial = _pending(args)
            state = _run_one(args, trial)
            if trial is not None and state.trial(trial).status == "proposed":
                _show(state, args)  # it did not start or was cancelled: running it again now would fail alike
                return _unmeasured(state, trial, args)
            if not args.json and trial is not None:
                t = state.trial(trial)
                print(f"trial {t.id}: {t.status} {t.verdict or ''}", flush=True)
        else:
            state = tune_next(ref)
    return _show(tune_report(ref), args)
