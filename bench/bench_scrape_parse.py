"""run_benchmark's once-a-second /metrics pass against the same pass done with prometheus_client's parser.

    .venv/bin/python bench/bench_scrape_parse.py [--repeat 30]

tools/bench/server_watch.parse_scrape reads only the vLLM series a run summary needs, line by line, because it
runs on the load generator's event loop between sends. This bench times it next to prometheus_client's full
parse collecting the same sums (checked equal), on a real vLLM capture (tests/data/captures) widened to 1, 8 and
64 engines as bench_diagnose.py does, and prints the milliseconds each takes per scrape and their ratio.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from bench_diagnose import CAPTURES, best_of, widen
from prometheus_client.parser import text_string_to_metric_families

from vllm_tune.tools.bench import server_watch
from vllm_tune.tools.bench.server_watch import Scrape, parse_scrape


def parse_with_library(text: str, t: float) -> Scrape:
    """The same sums as parse_scrape, from prometheus_client's parse of the whole exposition."""
    out = Scrape(t)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = s.name
            if name in server_watch._GAUGES:
                key = server_watch._GAUGES[name]
                out.gauges[key] = out.gauges.get(key, 0.0) + s.value
            elif name in server_watch._COUNTERS or (
                    name.endswith(("_sum", "_count")) and name.rsplit("_", 1)[0] in server_watch._HISTS):
                out.counters[name] = out.counters.get(name, 0.0) + s.value
            elif name.endswith("_bucket") and name[:-7] in server_watch._HISTS:
                le = s.labels["le"]
                edge = math.inf if le == "+Inf" else float(le)
                per = out.buckets.setdefault(name[:-7], {})
                per[edge] = per.get(edge, 0.0) + s.value
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    base = (CAPTURES / "overload.after.prom").read_text(encoding="utf-8")
    print(f"capture: {Path(CAPTURES / 'overload.after.prom').name}")
    print("engines    lines   parse_scrape ms   prometheus_client ms   ratio")
    for engines in (1, 8, 64):
        text = widen(base, engines)
        ours, lib = parse_scrape(text, 0.0), parse_with_library(text, 0.0)
        assert (ours.gauges, ours.counters, ours.buckets) == (lib.gauges, lib.counters, lib.buckets), engines
        t_ours, _ = best_of(lambda text=text: parse_scrape(text, 0.0), args.repeat)
        t_lib, _ = best_of(lambda text=text: parse_with_library(text, 0.0), args.repeat)
        print(f"{engines:7d} {len(text.splitlines()):8d} {t_ours * 1e3:17.2f} {t_lib * 1e3:22.2f} "
              f"{t_lib / t_ours:7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
