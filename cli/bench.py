"""`vllm-tune bench URL`: load-test a vLLM endpoint, SLO goodput and capacity search."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from vllm_tune.cli.common import EXIT_INTERRUPTED, fail, print_json


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="load-test a vLLM endpoint (vllm bench serve compatible results)",
                       description="Send load to a vLLM OpenAI endpoint and measure TTFT/TPOT/ITL/E2EL, goodput "
                                   "and SLO capacity. Non-loopback targets need --yes (and VLLM_TUNE_ALLOWED_TARGETS).")
    p.add_argument("url", help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="served model id (default: the first one)")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, help="closed loop: requests kept in flight")
    load.add_argument("--rate", type=float, help="open loop: requests per second")
    load.add_argument("--trace", help="JSONL trace to replay (timestamp in ms or offset_s)")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape for --rate (1 = Poisson)")
    p.add_argument("--arrival", choices=("poisson", "constant", "gamma"), default="poisson")
    p.add_argument("--ramp", metavar="START:END", help="ramp the rate linearly (req/s) over --duration")
    p.add_argument("--max-concurrency", type=int, help="cap on in-flight requests for --rate")
    p.add_argument("--num-prompts", type=int)
    p.add_argument("--duration", type=float, help="seconds to send load")
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--dataset", help="ShareGPT JSON or custom JSONL file")
    p.add_argument("--dataset-kind", choices=("random", "shared-prefix", "sharegpt", "jsonl"))
    p.add_argument("--prefix-len", type=int, default=0, help="shared-prefix tokens")
    p.add_argument("--num-prefixes", type=int, default=1)
    p.add_argument("--no-ignore-eos", action="store_true", help="let generation stop at EOS")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured warm-up requests")
    p.add_argument("--slo", help="SLO in ms: ttft=MS,tpot=MS,e2el=MS (or vLLM's form ttft:MS tpot:MS)")
    p.add_argument("--slo-percentile", type=float, default=99.0)
    p.add_argument("--percentiles", default="50,90,95,99")
    p.add_argument("--search-capacity", action="store_true", help="find the highest load meeting --slo")
    p.add_argument("--search-variable", choices=("rate", "concurrency"), default="rate")
    p.add_argument("--search-max", type=float)
    p.add_argument("--search-prompts", type=int, default=100, help="requests per search step")
    p.add_argument("--save-result", metavar="DIR", help="results directory (default ./vllm-tune-results)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, help="load processes (default: automatic)")
    p.add_argument("--serve-flag", action="append", default=[], metavar="KEY=VALUE",
                   help="server flag to record in provenance (repeatable)")
    p.add_argument("--label")
    p.add_argument("--plot", action="store_true", help="write PNG plots (needs matplotlib)")
    p.add_argument("--yes", action="store_true", help="confirm sending load to a non-loopback target")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_bench)


def _input(args: argparse.Namespace) -> Any:
    from vllm_tune.tools.bench.api import RunBenchmarkInput
    from vllm_tune.tools.slo import GOODPUT_METRICS, parse_slo

    slo: dict[str, float] = parse_slo(args.slo, allowed=GOODPUT_METRICS).as_dict() if args.slo else {}
    try:
        percentiles = [float(x) for x in args.percentiles.split(",") if x.strip()]
    except ValueError:
        fail(f"bad --percentiles {args.percentiles!r}")
    ramp_start = ramp_end = None
    if args.ramp:
        a, sep, b = args.ramp.partition(":")
        try:
            ramp_start, ramp_end = float(a), float(b)
        except ValueError:
            fail(f"bad --ramp {args.ramp!r}: expected START:END in req/s")
        if not sep:
            fail("--ramp needs START:END")
    flags: dict[str, str] = {}
    for item in args.serve_flag:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"bad --serve-flag {item!r}: expected KEY=VALUE")
        flags[key] = value
    return RunBenchmarkInput(
        url=args.url, model=args.model, endpoint=args.endpoint, concurrency=args.concurrency, rate=args.rate,
        trace=args.trace, arrival=args.arrival, burstiness=args.burstiness, ramp_start_rate=ramp_start,
        ramp_end_rate=ramp_end, max_concurrency=args.max_concurrency, num_prompts=args.num_prompts,
        duration_s=args.duration, input_len=args.input_len, output_len=args.output_len, dataset=args.dataset,
        dataset_kind=args.dataset_kind, prefix_len=args.prefix_len, num_prefixes=args.num_prefixes,
        ignore_eos=not args.no_ignore_eos, warmup_requests=args.warmup, slo=slo, slo_percentile=args.slo_percentile,
        percentiles=percentiles, search_capacity=args.search_capacity, search_variable=args.search_variable,
        search_max=args.search_max, search_prompts=args.search_prompts, save_result=args.save_result,
        seed=args.seed, confirm=args.yes, serve_flags=flags, workers=args.workers, label=args.label, plot=args.plot)


class _Bar:
    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()

    async def __call__(self, done: float, total: float | None, message: str) -> None:
        if not self.tty:
            return
        if total:
            filled = int(30 * min(1.0, done / total))
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {message[:70]:<70}")
        else:
            sys.stderr.write(f"\r{message[:100]:<100}")
        sys.stderr.flush()

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def _bench(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from vllm_tune.tools.bench.api import run_benchmark

    req = _input(args)
    bar = _Bar()
    stopping = [False]

    async def main() -> Any:
        loop = asyncio.get_running_loop()

        def on_sigint() -> None:
            if stopping[0]:
                raise KeyboardInterrupt
            stopping[0] = True
            sys.stderr.write("\nvllm-tune: stopping; finished requests are kept (Ctrl-C again to abort)\n")

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            return await run_benchmark(req, report=bar, stop=lambda: stopping[0])
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    out = asyncio.run(main())
    bar.end()
    if args.json:
        print_json(out)
    else:
        _print_summary(out)
    return EXIT_INTERRUPTED if out.state == "cancelled" else 0


def _print_summary(out: Any) -> None:
    r = out.result
    if r is not None:
        d = r.model_dump()
        rows = [("Successful requests", d["completed"]), ("Failed requests", d["failed"]),
                ("Benchmark duration (s)", d["duration"]), ("Total input tokens", d["total_input_tokens"]),
                ("Total generated tokens", d["total_output_tokens"]),
                ("Request throughput (req/s)", d["request_throughput"]),
                ("Request goodput (req/s)", d["request_goodput"]),
                ("Output token throughput (tok/s)", d["output_throughput"]),
                ("Peak output token throughput (tok/s)", d["max_output_tokens_per_s"]),
                ("Peak concurrent requests", d["max_concurrent_requests"]),
                ("Total token throughput (tok/s)", d["total_token_throughput"])]
        print(f"{' Serving Benchmark Result ':=^56}")
        for name, value in rows:
            if value is not None:
                print(f"{name + ':':<42}{value:>14.2f}" if isinstance(value, float) else f"{name + ':':<42}{value:>14}")
        for metric in ("ttft", "tpot", "itl", "e2el"):
            print(f"{' ' + metric.upper() + ' (ms) ':-^56}")
            for key, value in d.items():
                if key.endswith(f"_{metric}_ms") and not key.startswith("std_"):
                    print(f"{key:<42}{value:>14.2f}")
        check = d.get("client_check", {})
        print(f"{' Client self-check ':-^56}")
        print(f"{'p99 schedule lag (ms)':<42}{check.get('p99_lag_ms', 0.0):>14.2f}")
        print(f"{'client CPU s per 1000 requests':<42}{check.get('client_cpu_per_1k_requests_s', 0.0):>14.2f}")
        server = d.get("server") or {}
        if server.get("scrapes"):
            print(f"{' Server (/metrics, same window) ':-^56}")
            for key in ("max_running", "max_waiting", "max_kv_cache_usage", "preemptions", "server_mean_ttft_ms",
                        "server_mean_queue_time_ms", "client_minus_server_mean_ttft_ms"):
                if server.get(key) is not None:
                    print(f"{key:<42}{server[key]:>14.2f}")
    if out.capacity is not None:
        c = out.capacity
        print(f"{' SLO capacity ':=^56}")
        for p in c.curve:
            mark = "pass" if p.meets_slo else "FAIL"
            var = "concurrency" if p.phase == "probe" else c.variable
            print(f"  {p.phase:<8} {var}={p.value:<9.4g} achieved {p.achieved_request_throughput:8.2f} req/s "
                  f"{mark} {'; '.join(p.violations)}")
        print(f"capacity: {c.capacity}  ({c.confidence})")
        if c.knee:
            print(f"knee of the latency-throughput curve: {c.variable}={c.knee.value:g} "
                  f"({c.knee.achieved_request_throughput:.2f} req/s)")
    for w in out.warnings:
        print(f"warning: {w}")
    print(f"run id {out.run_id}; results: {out.result_path}")
