"""`vllm-tune alerts`: Prometheus alerting rules or a Grafana dashboard from the knowledge base."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vllm_tune.cli.common import print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "alerts", help="write Prometheus alert rules or a Grafana dashboard from the knowledge base",
        description="Turn the knowledge base's triage rules and starter alert thresholds into Prometheus alerting "
                    "rules (each annotated with its knowledge id and runbook), or write a Grafana dashboard of the "
                    "same series, using the metric names of the given vLLM version. Nothing is contacted.")
    p.add_argument("--format", choices=("prometheus-rules", "grafana"), default="prometheus-rules",
                   help="alerting rules for Prometheus, or a Grafana dashboard")
    p.add_argument("--selector", metavar="MATCHERS", help='label matchers added to every series, e.g. '
                   'job="vllm",namespace="prod"')
    p.add_argument("--vllm-version", metavar="V", help="metric names and rules of this vLLM release (default: the "
                   "newest release the knowledge base was checked against)")
    p.add_argument("--by", metavar="LABELS", default="job,instance,model_name",
                   help="labels each alert is raised per, comma separated (default: job,instance,model_name)")
    p.add_argument("--range", default="5m", metavar="DURATION", help="rate() and *_over_time window (default 5m)")
    p.add_argument("--for", dest="for_duration", metavar="DURATION",
                   help="`for:` of every rule (default: the entry's, else 5m); 0s fires at the first evaluation")
    p.add_argument("--slo", metavar="K=MS,...", help="targets of the triage rules: ttft=MS,itl=MS,tpot=MS,e2el=MS "
                   "(default: the interactive targets diagnose uses)")
    p.add_argument("--slo-percentile", default="p90", metavar="P", help="percentile the targets are judged at "
                   "(p90, p95, p99; default p90)")
    p.add_argument("--max-num-seqs", type=int, help="enables the rules that compare running with the limit")
    p.add_argument("--max-num-batched-tokens", type=int, help="the server's --max-num-batched-tokens")
    p.add_argument("--max-cudagraph-capture-size", type=int, help="the server's --max-cudagraph-capture-size")
    p.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    p.add_argument("--json", action="store_true", help="print the output model (rules, skipped, text) as JSON")
    p.set_defaults(handler=_alerts)


def _alerts(args: argparse.Namespace) -> int:
    from vllm_tune.tools.alerts import AlertsInput, build_alerts
    from vllm_tune.tools.diagnose.models import ServeFlags
    from vllm_tune.tools.errors import BadInputError
    from vllm_tune.tools.slo import SloTargets, parse_percentile, parse_slo

    request = AlertsInput(
        format=args.format, selector=args.selector, vllm_version=args.vllm_version,
        group_by=[label.strip() for label in args.by.split(",") if label.strip()], range=args.range,
        for_duration=args.for_duration, slo=parse_slo(args.slo) if args.slo else SloTargets(),
        slo_percentile=parse_percentile(args.slo_percentile),
        serve_flags=ServeFlags(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                               max_cudagraph_capture_size=args.max_cudagraph_capture_size))
    out = build_alerts(request)
    if args.out:
        try:
            Path(args.out).write_text(out.text, encoding="utf-8")
        except OSError as exc:
            raise BadInputError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    if args.json:
        print_json(out)
    elif not args.out:
        sys.stdout.write(out.text)
    what = f"{len(out.rules)} rules ({len(out.skipped)} not generated, listed in the file header)" \
        if out.format == "prometheus-rules" else f"a dashboard with {out.panels} panels"
    if args.out or args.json:
        print(f"vllm-tune alerts: {what} for vLLM {out.vllm_version}" + (f" -> {args.out}" if args.out else ""),
              file=sys.stderr)
    return 0
