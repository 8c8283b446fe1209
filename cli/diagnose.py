"""`vllm-tune diagnose`: explain why a vLLM deployment is slow, with evidence and knowledge citations."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vllm_tune.cli.common import print_json

MAX_FILE_BYTES = 64 * 1024 * 1024


def register(sub: Any) -> None:
    p = sub.add_parser(
        "diagnose", help="diagnose a live vLLM server, Prometheus, saved /metrics or a server log",
        description="Read every signal vLLM exposes over a window, tie it to the workload and your SLO, name the "
                    "bottleneck with evidence and cite the knowledge entries behind each action. Abstains when "
                    "the signals do not decide. The URL you type is allowed for this run; other non-loopback "
                    "targets must be in VLLM_TUNE_ALLOWED_TARGETS.")
    p.add_argument("url", nargs="?", help="live vLLM server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--prometheus", metavar="URL", help="Prometheus server that scrapes the vLLM replicas")
    p.add_argument("--selector", metavar="MATCHERS", help='Prometheus label matchers, e.g. pod=~"vllm-.*"')
    p.add_argument("--end", type=float, metavar="UNIX_S", help="end of the Prometheus range (default now)")
    p.add_argument("--metrics-file", action="append", default=[], metavar="FILE",
                   help="saved /metrics text; give it twice (earlier first) for a window")
    p.add_argument("--run", metavar="RUN_ID", help="a `vllm-tune bench` run id: diagnose the /metrics window "
                   "that run saved")
    p.add_argument("--result-dir", metavar="DIR", help="where --run is looked up (default $VLLM_TUNE_RESULTS_DIR "
                   "or ./vllm-tune-results)")
    p.add_argument("--window", type=float, metavar="S", help="window seconds: live scrape (default 10), "
                   "Prometheus range (default 300), or the time between two metrics files")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="live gauge sampling interval")
    p.add_argument("--log-file", metavar="FILE", help="vLLM server log")
    p.add_argument("--slo", metavar="K=MS,...", help="latency targets in ms: ttft=MS,itl=MS,tpot=MS,e2el=MS "
                   "(unset ones use default targets)")
    p.add_argument("--goodput", nargs="+", metavar="K:MS", help="the same targets in vllm bench serve's form: "
                   "ttft:500 tpot:50")
    p.add_argument("--slo-percentile", default="p90", metavar="P",
                   help="percentile the targets are judged at: p50, p90 (default), p95 or p99")
    p.add_argument("--max-num-seqs", type=int, help="the server's --max-num-seqs (metrics do not export it)")
    p.add_argument("--max-num-batched-tokens", type=int, help="the server's --max-num-batched-tokens")
    p.add_argument("--max-cudagraph-capture-size", type=int, help="the server's --max-cudagraph-capture-size")
    p.add_argument("--tensor-parallel-size", type=int, help="the server's --tensor-parallel-size")
    p.add_argument("--model", help="only this served model (model_name label)")
    p.add_argument("--json", action="store_true", help="print the full output model as JSON")
    from vllm_tune.cli.diagnose_watch import DURATION_HELP, WATCH_HELP

    p.add_argument("--watch", type=float, metavar="S", help=WATCH_HELP)
    p.add_argument("--duration", type=float, metavar="S", help=DURATION_HELP)
    p.set_defaults(handler=_diagnose)


def _read(path: str, what: str) -> str:
    from vllm_tune.tools.files import read_text

    # Capped while reading: st_size is 0 for /dev/zero and /proc files, and a FIFO is refused, not waited on.
    return read_text(path, limit=MAX_FILE_BYTES, what=what, errors="replace")


def _input(args: argparse.Namespace) -> Any:
    from vllm_tune.tools.diagnose.api import DiagnoseInput, MetricsText
    from vllm_tune.tools.diagnose.capture import captured_window
    from vllm_tune.tools.diagnose.models import ServeFlags
    from vllm_tune.tools.errors import BadInputError

    if len(args.metrics_file) > 2:
        raise BadInputError("give --metrics-file once (lifetime view) or twice (earlier first)")
    from vllm_tune.tools.slo import parse_percentile, parse_slo

    if args.slo and args.goodput:
        raise BadInputError("give the targets once: --slo ttft=500,itl=15 or --goodput ttft:500 itl:15")
    slo = parse_slo(args.slo or args.goodput or "")
    percentile = parse_percentile(args.slo_percentile)
    if percentile not in (50, 90, 95, 99):
        raise BadInputError(f"--slo-percentile {args.slo_percentile}: diagnose judges at p50, p90, p95 or p99")
    if args.run and (args.url or args.prometheus or args.metrics_file):
        raise BadInputError("--run names the window to diagnose: give it without a URL, --prometheus or "
                            "--metrics-file")
    if args.result_dir and not args.run:
        raise BadInputError("--result-dir says where --run is looked up; give --run RUN_ID too")
    metrics = [MetricsText(name=Path(f).name, text=_read(f, "metrics file")) for f in args.metrics_file]
    if not (args.url or args.prometheus or metrics or args.log_file or args.run):
        raise BadInputError("nothing to diagnose: give a URL, --prometheus, --metrics-file, --run or --log-file")
    return DiagnoseInput(
        run_id=args.run, results_dir=args.result_dir, url=args.url, prometheus_url=args.prometheus,
        prometheus_selector=args.selector, prometheus_end=args.end,
        metrics=metrics, log_text=_read(args.log_file, "log file") if args.log_file else None,
        window_s=args.window, sample_interval_s=args.interval, slo=slo,
        slo_percentile=int(percentile),
        captured_window_s=captured_window(args.metrics_file),
        serve_flags=ServeFlags(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                               max_cudagraph_capture_size=args.max_cudagraph_capture_size,
                               tensor_parallel_size=args.tensor_parallel_size),
        model=args.model)


def _diagnose(args: argparse.Namespace) -> int:
    import asyncio

    from vllm_tune.tools.diagnose.api import diagnose_metrics
    from vllm_tune.tools.diagnose.report import render_report
    from vllm_tune.tools.errors import BadInputError
    from vllm_tune.tools.net.targets import TargetPolicy

    request = _input(args)
    if args.watch is not None or args.duration is not None:
        from vllm_tune.cli.diagnose_watch import run_watch

        if args.watch is None:
            raise BadInputError("--duration bounds a --watch; give --watch S too")
        return run_watch(args, request)
    policy = TargetPolicy.from_env()
    for typed in (args.url, args.prometheus):
        if typed:
            policy = policy.with_target(typed)  # the operator typed it: allowed for this run only

    async def progress(done: float, total: float, message: str) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\r{message} ({done:.0f}/{total:.0f} s)", end="", file=sys.stderr, flush=True)

    out = asyncio.run(diagnose_metrics(request, policy=policy, progress=progress))
    if not args.json and sys.stderr.isatty() and args.url:
        print(file=sys.stderr)
    if args.json:
        print_json(out)
    else:
        sys.stdout.write(render_report(out))
    return 0
