"""`vllm-tune tune start|next|record|run|loop|report`: the tuning loop from a terminal."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from vllm_tune.cli.common import parse_env_items, print_json

if TYPE_CHECKING:
    from vllm_tune.tools.tune.models import TuneState


def register(sub: Any) -> None:
    p = sub.add_parser("tune", help="agent-driven tuning loop: one lever per trial, measured, kept only if better",
                       description="Start a session from a vllm serve command, then alternate: next (propose one "
                                   "lever change), run (start vLLM here, measure, stop) or record (a run you "
                                   "measured yourself), until the budget is spent; report shows the best command.")
    steps = p.add_subparsers(dest="step", metavar="STEP", required=True)

    start = steps.add_parser("start", help="create a session and propose the baseline trial")
    start.add_argument("--command", dest="command_line", required=True, help="the base `vllm serve ...` command")
    start.add_argument("--goal", choices=("latency", "throughput"), default="latency")
    start.add_argument("--slo", help="targets in ms, e.g. ttft=500,tpot=50")
    start.add_argument("--slo-percentile", type=float, default=99.0)
    load = start.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=int, help="closed-loop requests in flight")
    load.add_argument("--rate", type=float, help="open-loop requests per second")
    start.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    start.add_argument("--input-len", type=int, default=256)
    start.add_argument("--output-len", type=int, default=128)
    start.add_argument("--num-prompts", type=int, default=200)
    start.add_argument("--warmup-requests", type=int, default=4)
    start.add_argument("--lever", action="append", default=[], help="a flag the loop may move (repeatable)")
    start.add_argument("--max-trials", type=int, default=6)
    start.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                       help="environment for the servers the loop starts (repeatable; never secrets)")
    start.add_argument("--vllm-version")
    start.add_argument("--gpu")
    _common(start)
    start.set_defaults(handler=_start)

    for name, helptext, handler in (("next", "propose the next trial", _next),
                                    ("report", "the trials and the best command", _report)):
        q = steps.add_parser(name, help=helptext)
        q.add_argument("session")
        _common(q)
        q.set_defaults(handler=handler)

    record = steps.add_parser("record", help="attach a measured run (or a failure) to a trial")
    record.add_argument("session")
    record.add_argument("trial", type=int)
    what = record.add_mutually_exclusive_group(required=True)
    what.add_argument("--run", help="run id, run folder or result.json")
    what.add_argument("--failed", help="why the trial could not be measured")
    _common(record)
    record.set_defaults(handler=_record)

    for name, helptext, handler in (("run", "start vLLM here with the pending trial, measure it, stop it", _run),
                                    ("loop", "run trials and propose the next until the session is done", _loop)):
        r = steps.add_parser(name, help=helptext)
        r.add_argument("session")
        r.add_argument("--yes", action="store_true", help="confirm: starts vLLM on this machine and loads it")
        r.add_argument("--start-timeout", type=float, default=900.0)
        _common(r)
        r.set_defaults(handler=handler)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--save-result", help="results directory (sessions live in its tune/)")
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
        change = ", ".join(f"{k} {v}" for k, v in t.changes.items()) or "baseline"
        print(f" {mark}{t.id:>2} {t.status:<9} {value:>10} {t.verdict or '':<15} {change}{slo}")
        for note in t.notes:
            if not note.startswith("run_benchmark arguments"):
                print(f"       {note}")
    print(f"next: {state.next_step}")
    return 0


def _start(args: argparse.Namespace) -> int:
    from vllm_tune.tools.slo import parse_slo
    from vllm_tune.tools.tune.api import tune_start
    from vllm_tune.tools.tune.models import TuneStartInput, TuneWorkload

    workload = TuneWorkload(endpoint=args.endpoint, input_len=args.input_len, output_len=args.output_len,
                            concurrency=args.concurrency, rate=args.rate, num_prompts=args.num_prompts,
                            warmup_requests=args.warmup_requests)
    state = tune_start(TuneStartInput(
        command=args.command_line, goal=args.goal, slo=parse_slo(args.slo or "").as_dict(),
        slo_percentile=args.slo_percentile, workload=workload, levers=args.lever, max_trials=args.max_trials,
        env=parse_env_items(args.env), vllm_version=args.vllm_version, gpu=args.gpu, save_result=args.save_result))
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


def _run(args: argparse.Namespace) -> int:
    from vllm_tune.tools.tune.api import tune_run_trial
    from vllm_tune.tools.tune.models import RunTrialInput

    return _show(tune_run_trial(RunTrialInput(session_id=args.session, confirm=args.yes,
                                              start_timeout_s=args.start_timeout, save_result=args.save_result)),
                 args)


def _loop(args: argparse.Namespace) -> int:
    from vllm_tune.tools.tune.api import tune_next, tune_report, tune_run_trial
    from vllm_tune.tools.tune.models import RunTrialInput, SessionRef

    ref = SessionRef(session_id=args.session, save_result=args.save_result)
    state = tune_next(ref)
    while state.state != "done":
        if state.state == "needs-measurement":
            state = tune_run_trial(RunTrialInput(session_id=args.session, confirm=args.yes,
                                                 start_timeout_s=args.start_timeout, save_result=args.save_result))
            if not args.json and state.trials:
                t = state.trials[-1]
                print(f"trial {t.id}: {t.status} {t.verdict or ''}", flush=True)
        else:
            state = tune_next(ref)
    return _show(tune_report(ref), args)
