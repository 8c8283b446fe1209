"""`vllm-tune diagnose`: explain why a vLLM deployment is slow, with evidence and knowledge citations."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vllm_tune.cli.common import parse_key_values, print_json

_SLO_KEYS = {"ttft", "itl", "tpot", "e2el"}
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
    p.add_argument("--window", type=float, metavar="S", help="window seconds: live scrape (default 10), "
                   "Prometheus range (default 300), or the time between two metrics files")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="live gauge sampling interval")
    p.add_argument("--log-file", metavar="FILE", help="vLLM server log")
    p.add_argument("--slo", metavar="K=MS,...", help="targets in ms at p90: ttft=MS,itl=MS,tpot=MS,e2el=MS")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--max-cudagraph-capture-size", type=int)
    p.add_argument("--tensor-parallel-size", type=int)
    p.add_argument("--model", help="only this served model (model_name label)")
    p.add_argument("--json", action="store_true", help="print the full output model as JSON")
    p.set_defaults(handler=_diagnose)


def _read(path: str, what: str) -> str:
    from vllm_tune.tools.files import read_text

    # Capped while reading: st_size is 0 for /dev/zero and /proc files, and a FIFO is refused, not waited on.
    return read_text(path, limit=MAX_FILE_BYTES, what=what, errors="replace")


def _input(args: argparse.Namespace) -> Any:
    from vllm_tune.tools.diagnose.api import DiagnoseInput, MetricsText
    from vllm_tune.tools.diagnose.models import ServeFlags, SloTargets
    from vllm_tune.tools.errors import BadInputError

    if len(args.metrics_file) > 2:
        raise BadInputError("give --metrics-file once (lifetime view) or twice (earlier first)")
    slo = parse_key_values(args.slo, allowed=_SLO_KEYS, what="SLO") if args.slo else {}
    metrics = [MetricsText(name=Path(f).name, text=_read(f, "metrics file")) for f in args.metrics_file]
    if not (args.url or args.prometheus or metrics or args.log_file):
        raise BadInputError("nothing to diagnose: give a URL, --prometheus, --metrics-file or --log-file")
    return DiagnoseInput(
        url=args.url, prometheus_url=args.prometheus, prometheus_selector=args.selector, prometheus_end=args.end,
        metrics=metrics, log_text=_read(args.log_file, "log file") if args.log_file else None,
        window_s=args.window, sample_interval_s=args.interval,
        slo=SloTargets(**{f"{k}_ms": v for k, v in slo.items()}),
        serve_flags=ServeFlags(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                               max_cudagraph_capture_size=args.max_cudagraph_capture_size,
                               tensor_parallel_size=args.tensor_parallel_size),
        model=args.model)


def _diagnose(args: argparse.Namespace) -> int:
    import asyncio

    from vllm_tune.tools.diagnose.api import diagnose_metrics
    from vllm_tune.tools.diagnose.report import render_report
    from vllm_tune.tools.net.targets import TargetPolicy

    request = _input(args)
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
