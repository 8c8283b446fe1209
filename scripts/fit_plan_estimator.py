"""Fit the planner's estimator to knowledge/measured and write knowledge/calibration/plan-estimator.yaml.

    python scripts/fit_plan_estimator.py          # refit and write
    python scripts/fit_plan_estimator.py --check  # exit 1 when the stored file is not what the data gives
"""

from __future__ import annotations

import argparse

from generated_file import write_or_check

from vllm_tune.tools.parallel.fitfile import build_document
from vllm_tune.tools.parallel.measured import load_measured
from vllm_tune.tools.parallel.params import FIT_FILE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the stored file instead of writing")
    args = ap.parse_args(argv)
    doc, result = build_document(load_measured())
    r = doc["residuals"]
    print(f"{len(result.points)} measured figures, {r['kind']} output tok/s |est/meas-1|: median "
          f"{r['median']:.1%}, p90 {r['p90']:.1%}; rankings {result.rank_right}/{result.rank_total}")
    return write_or_check(FIT_FILE, doc, "scripts/fit_plan_estimator.py", check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
