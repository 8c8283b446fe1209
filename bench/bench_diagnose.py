"""diagnose_metrics on a 64-engine payload: analysis cost as a ratio to a bare prometheus_client parse.

Not run in CI. The payload is a real vLLM 0.32.0 capture pair (tests/data/captures/steady_light) with
every engine-labelled series copied to engines 0..63, the shape a data-parallel deployment of 64 engines
exposes on one /metrics endpoint. The baseline is what any tool must pay at least: prometheus_client's
parser walking every sample of both scrapes. The target of the diagnose issue is that the whole analysis
(parse, window deltas, percentiles, signals, triage engine, report model) adds under 50 % to that.

  .venv/bin/python bench/bench_diagnose.py [--engines 64] [--repeat 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from vllm_tune.tools.diagnose.api import diagnose_texts
from vllm_tune.tools.kb import load_knowledge

CAPTURES = Path(__file__).resolve().parents[1] / "tests" / "data" / "captures"
_ENGINE = re.compile(r'engine="0"')


def widen(text: str, engines: int) -> str:
    """Copy every engine="0" sample line to engines 0..engines-1; other lines stay once."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("#") or 'engine="0"' not in line:
            out.append(line)
            continue
        out.extend(_ENGINE.sub(f'engine="{i}"', line) for i in range(engines))
    return "\n".join(out) + "\n"


def bare_parse(texts: list[str]) -> int:
    n = 0
    for text in texts:
        for family in text_string_to_metric_families(text):
            n += len(family.samples)
    return n


def best_of(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    before = widen((CAPTURES / "steady_light.before.prom").read_text(), args.engines)
    after = widen((CAPTURES / "steady_light.after.prom").read_text(), args.engines)
    load_knowledge()  # loaded once per process in real use; keep it out of the per-call time
    samples = bare_parse([before, after])
    out = diagnose_texts([("before", before), ("after", after)], window_s=20.0)
    engines_seen = len(out.capacity.engines) if out.capacity.engines else 0

    base_min, base_med = best_of(lambda: bare_parse([before, after]), args.repeat)
    diag_min, diag_med = best_of(lambda: diagnose_texts([("before", before), ("after", after)], window_s=20.0),
                                 args.repeat)
    size_kib = (len(before) + len(after)) / 1024
    print(f"payload: {args.engines} engines, 2 scrapes, {size_kib:,.0f} KiB, {samples:,} samples; "
          f"diagnose saw {engines_seen} engines, {len(out.findings)} findings")
    print(f"bare prometheus_client parse : best {base_min * 1000:8.1f} ms  median {base_med * 1000:8.1f} ms")
    print(f"vllm-tune diagnose (full)    : best {diag_min * 1000:8.1f} ms  median {diag_med * 1000:8.1f} ms")
    ratio = diag_min / base_min
    print(f"ratio diagnose / bare parse  : {ratio:.2f}x  (analysis adds {100 * (ratio - 1):.0f} %; target < 50 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
