"""`vllm-tune compare A B [C ...]`: did a change make serving better, worse, or no different beyond noise."""

from __future__ import annotations

import argparse
from typing import Any

from vllm_tune.cli.common import print_json


def register(sub: Any) -> None:
    p = sub.add_parser("compare", help="compare benchmark runs: better, worse or within noise, and comparable?",
                       description="Compare saved benchmark results (vllm-tune bench results, run folders, run ids, "
                                   "or vllm bench serve --save-result JSON) against a baseline. Reads files only.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="result JSON, run folder or run id (2 or more)")
    p.add_argument("--baseline", type=int, default=0, metavar="N", help="index of the baseline run (default 0)")
    p.add_argument("--percentiles", help="percentiles to compare, e.g. 50,99 (default: those in both runs)")
    p.add_argument("--metrics", help="comma list, e.g. ttft,e2el,output_throughput (default: all)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--confidence", type=float, default=0.95, help="level of the bootstrap intervals")
    p.add_argument("--noise-threshold", type=float, default=5.0, metavar="PCT",
                   help="relative change called noise when runs lack per-request data (default 5)")
    p.add_argument("--min-effect", type=float, default=2.0, metavar="PCT",
                   help="smallest significant change called better/worse (default 2)")
    p.add_argument("--result-dir", "--results-dir", dest="results_dir", metavar="DIR",
                   help="where run ids are looked up (default $VLLM_TUNE_RESULTS_DIR or ./vllm-tune-results)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(handler=_compare)


def _input(args: argparse.Namespace) -> Any:
    from vllm_tune.tools.compare.api import CompareInput
    from vllm_tune.tools.errors import BadInputError

    if len(args.runs) < 2:
        raise BadInputError("compare needs at least two runs: a baseline and a candidate")
    percentiles: list[float] | None = None
    if args.percentiles:
        try:
            percentiles = [float(x) for x in args.percentiles.split(",") if x.strip()]
        except ValueError:
            raise BadInputError(f"bad --percentiles {args.percentiles!r}: expected numbers like 50,99") from None
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    return CompareInput(runs=args.runs, baseline=args.baseline, percentiles=percentiles, metrics=metrics,
                        seed=args.seed, confidence=args.confidence, noise_threshold_pct=args.noise_threshold,
                        min_effect_pct=args.min_effect, results_dir=args.results_dir)


def _compare(args: argparse.Namespace) -> int:
    from vllm_tune.tools.compare.api import compare_runs

    out = compare_runs(_input(args))
    if args.json:
        print_json(out)
    else:
        from vllm_tune.tools.compare.render import render_text

        print(render_text(out), end="")
    return 0
