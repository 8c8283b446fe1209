"""Pack a saved run of the what_if accuracy protocol into one file for tests/data/whatif/.

    python scripts/pack_whatif_runs.py RUNS_DIR tests/data/whatif/pinned-<date>T<hhmm>.jsonl.gz   # the bench's
    python scripts/pack_whatif_runs.py RUNS_DIR tests/data/whatif/proof-<date>T<hhmm>.jsonl.gz    # the test's

RUNS_DIR is what bench/bench_whatif_accuracy.py or tests/integration/test_whatif_vllm.py (with
VLLM_TUNE_KEEP_WHATIF_RUNS=RUNS_DIR) saved. Every result.json under it becomes one JSON line, trimmed to what the
replay reads: the per-request latencies, queue times and client check and the server window's diagnosis are left
out, and each request's TTFT is kept to the microsecond (bench/replay_whatif_accuracy.py --ttft-shape). A name
starting with proof- tells the replay that the runs carry the integration test's seeds (accuracy.saved_seed).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

DROPPED = ("latencies", "queue_times", "client_check")


def trimmed(result: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in result.items() if k not in DROPPED}
    if isinstance(out.get("server"), dict):
        out["server"] = {k: v for k, v in out["server"].items() if k != "diagnosis"}
    if isinstance(out.get("ttfts"), list):
        out["ttfts"] = [round(float(t), 6) for t in out["ttfts"]]
    return out


def pack(runs: Path, out: Path) -> int:
    """Write the packed file (byte-for-byte the same for the same runs) and return how many results it holds."""
    results = [trimmed(json.loads(f.read_text(encoding="utf-8"))) for f in sorted(runs.rglob("result.json"))]
    if not results:
        raise ValueError(f"no result.json under {runs}")
    data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in results).encode("utf-8")
    out.write_bytes(gzip.compress(data, mtime=0))
    return len(results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, help="the folder the bench or the kept integration test saved its runs in")
    ap.add_argument("out", type=Path, help="the .jsonl.gz to write")
    args = ap.parse_args(argv)
    if not args.out.name.endswith(".jsonl.gz"):
        print(f"the packed file must end in .jsonl.gz: {args.out}", file=sys.stderr)
        return 2
    try:
        n = pack(args.runs, args.out)
    except (OSError, ValueError) as exc:  # no such folder, unreadable or not JSON
        print(f"cannot pack {args.runs}: {exc}", file=sys.stderr)
        return 2
    print(f"{n} results -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
