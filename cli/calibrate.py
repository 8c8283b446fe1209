"""`vllm-tune calibrate RESULT...`: fit one hardware's estimator constants from saved benchmark results."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vllm_tune.cli.common import print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate", help="fit the planner's per-hardware constants from your own benchmark results",
        description="Fit the per-step and per-request fixed costs and an efficiency scale of the planner's "
                    "estimator to saved benchmark results (vllm-tune bench / plan --verify JSON files) measured on "
                    "one hardware, and store them in $XDG_CONFIG_HOME/vllm-tune/calibration.yaml. Later plans on "
                    "that hardware use them and say so. A result must record its hardware and model (serve flags "
                    "hardware=..., model=...; plan --verify records them) or take them from --hardware/--model.")
    p.add_argument("results", nargs="+", help="result JSON files")
    p.add_argument("--hardware", help="catalog hardware name the results were measured on (H100, CPU, ...)")
    p.add_argument("--model", help="model the server ran (catalog name, local dir or HF id)")
    p.add_argument("--offline", action="store_true", help="never contact the hub to resolve the model")
    p.add_argument("--dry-run", action="store_true", help="fit and print, do not store")
    p.add_argument("--json", action="store_true", help="print the stored calibration as JSON")
    p.set_defaults(handler=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from vllm_tune.tools.parallel.calibrate import calibrate

    out = calibrate([Path(p) for p in args.results], hardware=args.hardware, model=args.model,
                    offline=args.offline, save=not args.dry_run)
    if args.json:
        print_json(out)
        return 0
    c = out.calibration
    print(f"{out.hardware}: per-step cost {c.step_fixed_ms:.2f} ms, per request {c.seq_fixed_us:.1f} us, "
          f"efficiency x{c.efficiency_scale:.3g} from {len(out.runs)} run(s)")
    for r in out.runs:
        before = f"{r.before:,.1f}" if r.before is not None else "n/a"
        after = f"{r.after:,.1f}" if r.after is not None else "n/a"
        print(f"  {r.path}: measured {r.measured_output_tokens_per_s:,.1f} output tok/s; estimate before "
              f"{before}, after {after}")
    print("not stored (--dry-run)" if args.dry_run else f"stored in {out.stored_at}")
    return 0
