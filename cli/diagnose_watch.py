"""`vllm-tune diagnose URL --watch S`: a compact line per interval, a full report when the verdict changes, and
the summary of the whole watch at the end, on Ctrl-C or on SIGTERM."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from vllm_tune.cli.signals import raising_on

WATCH_HELP = ("re-diagnose every S seconds over a sliding window (--window, default 3 intervals) until "
              "--duration; only loopback or VLLM_TUNE_ALLOWED_TARGETS targets; Ctrl-C prints the summary")
DURATION_HELP = "with --watch: stop after S seconds (default 600, at most 86400)"


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, default=str), flush=True)


def run_watch(args: argparse.Namespace, request: Any) -> int:
    from vllm_tune.tools.diagnose.models import DiagnoseOutput
    from vllm_tune.tools.diagnose.report import render_report
    from vllm_tune.tools.diagnose.watch import (
        DEFAULT_DURATION_S,
        StopWatch,
        WatchSettings,
        WatchTick,
        render_change,
        render_summary,
        render_tick,
        watch_live,
    )
    from vllm_tune.tools.net.targets import TargetPolicy

    settings = WatchSettings(interval_s=args.watch, duration_s=args.duration or DEFAULT_DURATION_S,
                             window_s=args.window, sample_interval_s=min(args.interval, args.watch))
    # A watch polls for as long as it runs, so unlike a one-shot diagnosis the typed URL is not allowed by
    # itself: it must be loopback or listed in VLLM_TUNE_ALLOWED_TARGETS.
    policy = TargetPolicy.from_env()
    last_key: list[str | None] = [None]

    def on_tick(tick: WatchTick, out: DiagnoseOutput) -> None:
        report = tick.changed or (last_key[0] is None and out.bottleneck is not None)
        if args.json:
            _emit({"event": "tick", **tick.model_dump(mode="json")})
            if report:
                _emit({"event": "verdict_change", "from": last_key[0], "diagnosis": out.model_dump(mode="json")})
        else:
            print(render_tick(tick), flush=True)
            if report:
                print(render_change(tick, last_key[0]), flush=True)
                sys.stdout.write(render_report(out))
                sys.stdout.flush()
        last_key[0] = tick.verdict_key

    with raising_on((signal.SIGTERM,), lambda signum: StopWatch(signal.Signals(signum).name), once=False):
        summary = watch_live(request, settings, policy=policy, on_tick=on_tick)
    if args.json:
        _emit({"event": "summary", **summary.model_dump(mode="json")})
    else:
        sys.stdout.write(render_summary(summary))
        if summary.whole is not None:
            print("== the whole watch as one window ==")
            sys.stdout.write(render_report(summary.whole))
    sys.stdout.flush()
    return 0
