"""`vllm-tune whatif URL|--from RESULT --set KEY=VALUE ...`: predict flag or load changes, no restart."""

from __future__ import annotations

import argparse
from typing import Any

from vllm_tune.cli.common import GOODPUT_HELP, fail, print_json, slo_from_args


def register(sub: Any) -> None:
    p = sub.add_parser(
        "whatif", help="predict what a flag or load change does (scheduler simulation, calibrated on the server)",
        description="Simulate vLLM's scheduler with step times calibrated on this server and compare variants "
                    "(--set, repeatable; each is one variant of comma-separated KEY=VALUE) against the unchanged "
                    "baseline. Calibration: --calibration FILE, --from RESULT (saved vllm-tune bench results, "
                    "nothing sent) or URL (a short probe load on the server; non-loopback needs --yes).")
    p.add_argument("url", nargs="?", help="server base URL: calibrate by a short probe load on it (sends load)")
    p.add_argument("--from", dest="from_result", action="append", default=[], metavar="RESULT",
                   help="saved run_benchmark result (result.json or run dir) to calibrate on; repeatable")
    p.add_argument("--calibration", metavar="FILE", help="a saved what_if calibration")
    p.add_argument("--probe", action="store_true", help="calibrate by probing URL (the default when only URL is given)")
    p.add_argument("--metrics-window", type=float, metavar="S",
                   help="calibrate passively from URL's /metrics over S seconds of its own traffic (sends no load)")
    p.add_argument("--save-calibration", metavar="FILE", help="write the fitted calibration here for reuse")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="K=V[,K=V]",
                   help="one variant, e.g. --set max_num_batched_tokens=8192 --set max_num_seqs=64,rate=20")
    p.add_argument("--serve-flag", action="append", default=[], metavar="KEY=VALUE",
                   help="the server's current scheduler flag (vLLM does not export them), e.g. max_num_seqs=256")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, help="closed-loop requests in flight")
    load.add_argument("--rate", type=float, help="open-loop requests per second")
    load.add_argument("--trace", help="JSONL trace to replay")
    p.add_argument("--arrival", choices=("poisson", "constant", "gamma"), default="poisson",
                   help="inter-arrival process for --rate")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape: 1 = Poisson")
    p.add_argument("--max-concurrency", type=int, help="cap on requests in flight")
    p.add_argument("--num-prompts", type=int, help="simulated requests")
    p.add_argument("--duration", type=float, help="simulated seconds of load instead of a count")
    p.add_argument("--input-len", type=int, help="prompt tokens per request")
    p.add_argument("--output-len", type=int, help="output tokens per request")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated arrivals")
    p.add_argument("--slo", help="SLO in ms: ttft=MS,tpot=MS,e2el=MS (goodput)")
    p.add_argument("--goodput", nargs="+", metavar="KEY:MS", help=GOODPUT_HELP)
    p.add_argument("--search-capacity", action="store_true", help="also predict the SLO capacity per variant")
    p.add_argument("--search-variable", choices=("rate", "concurrency"), default="rate",
                   help="what the predicted capacity search raises")
    p.add_argument("--slo-percentile", type=float, default=99.0, help="percentile the SLO is judged at")
    p.add_argument("--yes", action="store_true", help="confirm probing a non-loopback target")
    p.add_argument("--json", action="store_true", help="print the predictions as JSON")
    p.set_defaults(handler=_whatif)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (x.strip() for item in items for x in item.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            fail(f"bad {what} {part!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _input(args: argparse.Namespace) -> Any:
    from vllm_tune.tools.whatif.api import WhatIfInput

    if args.probe and not args.url:
        fail("--probe needs the server URL")
    # A URL without another calibration source means: probe it (like `bench URL`, this sends load).
    probe = args.probe or bool(args.url and not args.from_result and not args.calibration
                               and args.metrics_window is None)
    slo = slo_from_args(args)
    return WhatIfInput(
        url=args.url, from_result=args.from_result, calibration=args.calibration, probe=probe,
        metrics_window_s=args.metrics_window, confirm=args.yes, serve_flags=_pairs(args.serve_flag, "--serve-flag"),
        variants=[_pairs([s], "--set") for s in args.sets], concurrency=args.concurrency, rate=args.rate,
        trace=args.trace, arrival=args.arrival, burstiness=args.burstiness, max_concurrency=args.max_concurrency,
        num_prompts=args.num_prompts, duration_s=args.duration, input_len=args.input_len,
        output_len=args.output_len, seed=args.seed, slo=slo, search_capacity=args.search_capacity,
        search_variable=args.search_variable, slo_percentile=args.slo_percentile,
        save_calibration=args.save_calibration)


_COLUMNS = [("variant", "variant", "{}"), ("kind", "kind", "{}"), ("max_num_seqs", "seqs", "{}"),
            ("max_num_batched_tokens", "batch tok", "{}"),
            ("request_throughput", "req/s", "{:.2f}"), ("output_throughput", "out tok/s", "{:.0f}"),
            ("median_ttft_ms", "TTFT p50", "{:.1f}"), ("p90_ttft_ms", "TTFT p90", "{:.1f}"),
            ("median_itl_ms", "ITL p50", "{:.2f}"), ("p90_itl_ms", "ITL p90", "{:.2f}"),
            ("median_tpot_ms", "TPOT p50", "{:.2f}"), ("request_goodput", "goodput", "{:.2f}"),
            ("preemptions", "preempt", "{}"), ("max_waiting", "max wait", "{:.0f}"), ("capacity", "capacity", "{:.4g}")]


def format_table(rows: list[dict[str, Any]]) -> str:
    # The kind column only when some row is not an estimate: a bound must not read as one.
    cols = [c for c in _COLUMNS if any(r.get(c[0]) is not None for r in rows)
            and (c[0] != "kind" or any(r.get("kind", "estimate") != "estimate" for r in rows))]
    cells = [[h for _, h, _ in cols]]
    for r in rows:
        cells.append(["-" if r.get(k) is None else r[k] if isinstance(r[k], str) else fmt.format(r[k])
                      for k, _, fmt in cols])
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _whatif(args: argparse.Namespace) -> int:
    import asyncio

    from vllm_tune.tools.slo import percentile_label
    from vllm_tune.tools.whatif.api import what_if

    out = asyncio.run(what_if(_input(args)))
    if args.json:
        print_json(out)
        return 0
    cal = out.calibration
    m = cal.step_model
    print(f"calibration ({cal.source}, {cal.rounds} rounds{'' if cal.converged else ', not converged'}): step = "
          f"{m.fixed_s * 1e3:.2f} ms + {m.per_decode_seq_s * 1e3:.3f} ms/decode seq + "
          f"{m.per_prefill_token_s * 1e6:.2f} us/prefill token + {m.per_context_token_s * 1e9:.2f} ns/context token; "
          f"request hand-off {m.request_overhead_s * 1e3:.1f} ms + {m.overhead_per_request_in_flight_s * 1e3:.2f} ms "
          f"per request in flight (+ {m.idle_wake_s * 1e3:.1f} ms sent to an idle server), new requests taken in "
          f"{m.intake_gap_s * 1e3:.2f} ms apart, stream start "
          f"{m.stream_start_s * 1e3:.1f} ms, API server "
          f"{m.stream_per_seq_s * 1e6:.0f} us per stream a round (tokens merge into chunks beyond), token gaps "
          f"spread by a log-normal sigma {m.itl_spread:.2f}, each request's decode time by {m.tpot_spread:.2f}")
    if cal.max_abs_relative_error is not None:
        print(f"  reproduces its {cal.conditions.get('seen', {}).get('runs', '?')} runs within "
              f"{cal.max_abs_relative_error:.0%} (residuals in --json)")
    print(f"load: {', '.join(f'{k}={v}' for k, v in out.baseline.load.items())}")
    print()
    print(format_table(out.table))
    for p in [out.baseline, *out.variants]:
        if p.capacity is not None and p.capacity.decided_by:
            print(f"capacity ({p.name}) at {percentile_label(p.capacity.slo_percentile)}: "
                  + "; ".join(p.capacity.decided_by))
    for p in [out.baseline, *out.variants]:
        for w in p.warnings:
            print(f"warning ({p.name}): {w}")
    for note in out.notes:
        print(f"note: {note}")
    if out.calibration_path:
        print(f"calibration saved: {out.calibration_path}")
    return 0
