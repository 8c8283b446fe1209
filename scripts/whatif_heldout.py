"""Replay the what_if accuracy protocol's saved runs and write knowledge/calibration/whatif-heldout.yaml.

    python scripts/whatif_heldout.py          # replay tests/data/whatif/*.jsonl.gz and write
    python scripts/whatif_heldout.py --check  # exit 1 when the stored file is not what the runs give
"""

from __future__ import annotations

import argparse
from pathlib import Path

from generated_file import write_or_check

from vllm_tune.tools.whatif.accuracy import CaseOutcome, replay_saved
from vllm_tune.tools.whatif.heldout import HELDOUT_FILE, document

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "whatif"


def replay_all(data: Path = DATA) -> dict[str, list[CaseOutcome]]:
    """Every saved run under `data`, each case fitted and predicted with the current model (each run's own seeds)."""
    return {path.name: replay_saved(path) for path in sorted(data.glob("*.jsonl.gz"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the stored file instead of writing")
    args = ap.parse_args(argv)
    doc = document(replay_all())
    for kind, k in doc["kinds"].items():
        print(f"{kind}: {k['within_target']} of {k['judged']} within {k['target']:.0%}, median |error| "
              f"{k['median_error']:.1%}, p90 {k['p90_error']:.1%}, worst {k['worst_error']:.1%}")
    return write_or_check(HELDOUT_FILE, doc, "scripts/whatif_heldout.py", check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
