"""`vllm-tune capture URL --window 30 --out DIR`: two timestamped /metrics scrapes for a later diagnose."""

from __future__ import annotations

import argparse
from typing import Any

from vllm_tune.cli.common import print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "capture", help="save two timestamped /metrics scrapes of a vLLM server, a window apart",
        description="Scrape URL/metrics now and again after --window seconds (no load is sent) and write "
                    "DIR/before.prom, DIR/after.prom and DIR/capture.json. Each file starts with a comment that "
                    "dates it, so `vllm-tune diagnose --metrics-file DIR/before.prom --metrics-file "
                    "DIR/after.prom` reads the real window from the files. The URL you type is allowed for this "
                    "run; other non-loopback targets must be in VLLM_TUNE_ALLOWED_TARGETS.")
    p.add_argument("url", help="vLLM server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--window", type=float, default=30.0, metavar="S", help="seconds between the scrapes (default 30)")
    p.add_argument("--out", default="vllm-tune-capture", metavar="DIR",
                   help="directory to write into (default ./vllm-tune-capture)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=_capture)


def _capture(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from vllm_tune.tools.diagnose.capture import capture
    from vllm_tune.tools.net.targets import TargetPolicy

    policy = TargetPolicy.from_env().with_target(args.url)
    result = asyncio.run(capture(args.url, args.window, Path(args.out), policy=policy))
    if args.json:
        print_json(result)
    else:
        print(f"captured {result.url}/metrics twice, {result.window_s:.2f} s apart: {result.before}, {result.after} "
              f"({result.meta})")
        print(f"diagnose: vllm-tune diagnose --metrics-file {result.before} --metrics-file {result.after}")
    return 0
