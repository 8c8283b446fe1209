"""`vllm-tune bench URL`: load-test a vLLM endpoint, SLO goodput and capacity search."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from vllm_tune.cli.common import EXIT_INTERRUPTED, fail, print_json

# Flags that mean what they mean in `vllm bench serve` (name, type and default); a test reads vLLM's own parser.
SHARED_WITH_VLLM_BENCH = (
    "--base-url", "--host", "--port", "--model", "--backend", "--endpoint", "--request-rate", "--max-concurrency",
    "--burstiness", "--num-prompts", "--num-warmups", "--dataset-name", "--dataset-path", "--random-input-len",
    "--random-output-len", "--random-range-ratio", "--random-prefix-len", "--ignore-eos", "--goodput",
    "--percentile-metrics", "--metric-percentiles", "--seed", "--save-result", "--result-dir", "--result-filename",
    "--label", "--ramp-up-strategy", "--ramp-up-start-rps", "--ramp-up-end-rps",
)
# vllm bench serve's --dataset-name values we generate, and our workload kind for each.
_DATASETS = {"random": "random", "sharegpt": "sharegpt", "custom": "jsonl", "prefix_repetition": "shared-prefix"}
_BACKENDS = ("openai", "vllm", "openai-chat")
_CHAT_ENDPOINTS = ("chat", "/v1/chat/completions")
_COMPLETION_ENDPOINTS = ("completions", "/v1/completions")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench", help="load-test a vLLM endpoint (vllm bench serve flags and result fields)",
        description="Send load to a vLLM OpenAI endpoint and measure TTFT/TPOT/ITL/E2EL, goodput and SLO capacity. "
                    "Flags shared with `vllm bench serve` keep its names, meanings and defaults, so its command "
                    "line works here (our older names stay as aliases). Non-loopback targets need --yes and "
                    "VLLM_TUNE_ALLOWED_TARGETS.")
    p.add_argument("url", nargs="?", help="server base URL, e.g. http://127.0.0.1:8000 (or --base-url, --host/--port)")
    p.add_argument("--base-url", type=str, default=None, help="server base URL (vllm bench serve's name)")
    p.add_argument("--host", type=str, default="127.0.0.1", help="server host when no URL is given")
    p.add_argument("--port", type=int, default=8000, help="server port when no URL is given")
    p.add_argument("--model", type=str, default=None, help="served model id (default: the first one)")
    p.add_argument("--backend", type=str, default="openai", choices=_BACKENDS,
                   help="openai/vllm: completions API; openai-chat: chat completions API")
    p.add_argument("--endpoint", type=str, default="/v1/completions",
                   help="/v1/completions or /v1/chat/completions (also: completions, chat)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--request-rate", "--rate", dest="request_rate", type=float, default=float("inf"),
                      help="requests per second; inf (the default) sends every request at once, so "
                           "--max-concurrency alone gives a closed loop")
    load.add_argument("--concurrency", type=int, help="closed loop: keep this many requests in flight "
                                                      "(= --max-concurrency N at --request-rate inf)")
    load.add_argument("--trace", help="JSONL trace to replay (timestamp in ms or offset_s per line)")
    p.add_argument("--max-concurrency", type=int, default=None, help="cap on requests in flight")
    p.add_argument("--burstiness", type=float, default=1.0,
                   help="gamma shape of inter-arrival times: 1 = Poisson, <1 burstier, >1 smoother")
    p.add_argument("--arrival", choices=("poisson", "constant", "gamma"), default="poisson",
                   help="inter-arrival process for a finite --request-rate (gamma when --burstiness != 1)")
    p.add_argument("--ramp-up-strategy", type=str, default=None, choices=("linear",),
                   help="ramp the rate from --ramp-up-start-rps to --ramp-up-end-rps over --duration")
    p.add_argument("--ramp-up-start-rps", type=int, default=None, help="ramp start rate (req/s)")
    p.add_argument("--ramp-up-end-rps", type=int, default=None, help="ramp end rate (req/s)")
    p.add_argument("--ramp", metavar="START:END", help="alias of a linear ramp with fractional rates (req/s)")
    p.add_argument("--num-prompts", type=int, default=1000, help="measured requests")
    p.add_argument("--duration", type=float, help="seconds to send load (instead of a request count)")
    p.add_argument("--num-warmups", "--warmup", dest="num_warmups", type=int, default=0,
                   help="unmeasured warm-up requests sent first")
    p.add_argument("--dataset-name", type=str, default="random", choices=tuple(_DATASETS),
                   help="random (token-exact prompts), sharegpt, custom (JSONL), prefix_repetition")
    p.add_argument("--dataset-kind", choices=("random", "shared-prefix", "sharegpt", "jsonl"),
                   help="our older name of --dataset-name")
    p.add_argument("--dataset-path", "--dataset", dest="dataset_path", type=str, default=None,
                   help="ShareGPT JSON or custom JSONL file")
    p.add_argument("--random-input-len", "--input-len", dest="random_input_len", type=int, default=1024,
                   help="prompt tokens per request (random datasets)")
    p.add_argument("--random-output-len", "--output-len", dest="random_output_len", type=int, default=128,
                   help="output tokens per request")
    p.add_argument("--random-range-ratio", type=str, default="0.0",
                   help="lengths drawn uniformly in [len*(1-r), len*(1+r)], 0 <= r < 1")
    p.add_argument("--random-prefix-len", "--prefix-len", dest="random_prefix_len", type=int, default=0,
                   help="tokens of a prefix shared by the prompts, before the random part")
    p.add_argument("--num-prefixes", type=int, default=1, help="distinct shared prefixes")
    p.add_argument("--ignore-eos", action="store_true",
                   help="generate exactly the output length; like vllm bench serve it is always on for the "
                        "random dataset")
    p.add_argument("--no-ignore-eos", action="store_true", help="let random-dataset generation stop at EOS")
    p.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                   help="SLO for goodput as vllm bench serve takes it, e.g. ttft:500 tpot:50 (ttft, tpot, e2el)")
    p.add_argument("--slo", help="the same SLO as ttft=MS,tpot=MS,e2el=MS")
    p.add_argument("--slo-percentile", type=float, default=99.0, help="percentile the capacity search checks")
    p.add_argument("--percentile-metrics", type=str, default=None,
                   help="accepted for compatibility: results always carry ttft, tpot, itl and e2el percentiles")
    p.add_argument("--metric-percentiles", "--percentiles", dest="metric_percentiles", type=str, default="99",
                   help="comma-separated percentiles to report, e.g. 50,90,99 (mean, median and std always)")
    p.add_argument("--search-capacity", action="store_true", help="find the highest load meeting the SLO")
    p.add_argument("--search-variable", choices=("rate", "concurrency"), default="rate",
                   help="what the capacity search raises")
    p.add_argument("--search-max", type=float, help="upper bound of the capacity search")
    p.add_argument("--search-prompts", type=int, default=100, help="requests per search step")
    p.add_argument("--simulate", action="store_true",
                   help="with --search-capacity: predict the capacity with what_if instead of sending the search "
                        "load, calibrated by --calibration, --from or --probe (as `vllm-tune whatif`)")
    p.add_argument("--calibration", metavar="FILE", help="--simulate: a saved what_if calibration")
    p.add_argument("--from", dest="from_result", action="append", default=[], metavar="RESULT",
                   help="--simulate: saved run_benchmark result to calibrate on (repeatable; nothing sent)")
    p.add_argument("--probe", action="store_true", help="--simulate: calibrate by a short probe load on URL")
    p.add_argument("--verify", action="store_true",
                   help="--simulate: then run one real measured run at the predicted capacity and compare")
    p.add_argument("--save-result", action="store_true",
                   help="also write the result JSON to --result-dir/--result-filename, as vllm bench serve does "
                        "(every run is kept in the results directory anyway)")
    p.add_argument("--result-dir", type=str, default=None,
                   help="directory for results (default $VLLM_TUNE_RESULTS_DIR or ./vllm-tune-results)")
    p.add_argument("--result-filename", type=str, default=None,
                   help="file name for --save-result (default: vllm bench serve's pattern)")
    p.add_argument("--seed", type=int, default=0, help="random seed of prompts and arrivals")
    p.add_argument("--workers", type=int, help="load processes (default: automatic)")
    p.add_argument("--request-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="give up on one request after this long (default 600; an endless stream ends here)")
    p.add_argument("--serve-flag", action="append", default=[], metavar="KEY=VALUE",
                   help="server flag to record in provenance (repeatable)")
    p.add_argument("--label", type=str, default=None, help="label stored with the result")
    p.add_argument("--plot", action="store_true", help="write PNG plots (needs matplotlib)")
    p.add_argument("--yes", action="store_true", help="confirm sending load to a non-loopback target")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=_bench)


def _base_url(args: argparse.Namespace) -> str:
    if args.url and args.base_url and args.url != args.base_url:
        fail("give the server either as URL or as --base-url, not both")
    return str(args.url or args.base_url or f"http://{args.host}:{args.port}")


def _endpoint(args: argparse.Namespace) -> str:
    if args.endpoint in _CHAT_ENDPOINTS or (args.backend == "openai-chat" and args.endpoint == "/v1/completions"):
        return "chat"
    if args.endpoint in _COMPLETION_ENDPOINTS:
        return "completions"
    fail(f"--endpoint {args.endpoint!r}: expected /v1/completions or /v1/chat/completions")


def _slo(args: argparse.Namespace) -> dict[str, float]:
    from vllm_tune.cli.common import slo_from_args

    return slo_from_args(args)


def _ramp(args: argparse.Namespace) -> tuple[float | None, float | None]:
    if args.ramp:
        a, sep, b = args.ramp.partition(":")
        if not sep:
            fail("--ramp needs START:END")
        try:
            return float(a), float(b)
        except ValueError:
            fail(f"bad --ramp {args.ramp!r}: expected START:END in req/s")
    if args.ramp_up_strategy or args.ramp_up_start_rps is not None or args.ramp_up_end_rps is not None:
        if args.ramp_up_start_rps is None or args.ramp_up_end_rps is None:
            fail("a ramp needs --ramp-up-start-rps and --ramp-up-end-rps")
        return float(args.ramp_up_start_rps), float(args.ramp_up_end_rps)
    return None, None


def _load(args: argparse.Namespace, ramped: bool) -> tuple[int | None, float | None, int | None]:
    """(concurrency, rate, max_concurrency) with vllm bench serve's meaning of --request-rate inf."""
    rate = args.request_rate
    if args.concurrency is not None or args.trace or ramped:
        return args.concurrency, None, args.max_concurrency
    if rate == float("inf"):
        if args.search_capacity:
            return None, None, args.max_concurrency
        # Everything released at t=0 behind a cap of N is a closed loop of N; with no cap, of all requests.
        return args.max_concurrency or args.num_prompts, None, None
    if not rate > 0:
        fail(f"--request-rate {rate:g}: must be positive (or inf)")
    return None, rate, args.max_concurrency


def _input(args: argparse.Namespace) -> Any:
    from vllm_tune.tools.bench.api import RunBenchmarkInput

    try:
        percentiles = [float(x) for x in args.metric_percentiles.split(",") if x.strip()]
    except ValueError:
        fail(f"bad --metric-percentiles {args.metric_percentiles!r}: expected numbers, e.g. 50,90,99")
    try:
        range_ratio = float(args.random_range_ratio)
    except ValueError:
        fail(f"bad --random-range-ratio {args.random_range_ratio!r}: expected a number in [0, 1)")
    ramp_start, ramp_end = _ramp(args)
    concurrency, rate, cap = _load(args, ramp_start is not None)
    flags: dict[str, str] = {}
    for item in args.serve_flag:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"bad --serve-flag {item!r}: expected KEY=VALUE")
        flags[key] = value
    kind = args.dataset_kind or _DATASETS[args.dataset_name]
    if args.dataset_kind is None and args.dataset_name == "random" and args.random_prefix_len:
        kind = "shared-prefix"
    if kind in ("sharegpt", "jsonl") and not args.dataset_path:
        fail(f"--dataset-name {args.dataset_name} needs --dataset-path")
    # vllm bench serve forces ignore_eos for its random datasets (so outputs reach the requested length).
    ignore_eos = args.ignore_eos or (kind in ("random", "shared-prefix") and not args.no_ignore_eos)
    return RunBenchmarkInput(
        url=_base_url(args), model=args.model, endpoint=_endpoint(args), concurrency=concurrency, rate=rate,
        trace=args.trace, arrival="gamma" if args.burstiness != 1.0 and args.arrival == "poisson" else args.arrival,
        burstiness=args.burstiness, ramp_start_rate=ramp_start, ramp_end_rate=ramp_end, max_concurrency=cap,
        num_prompts=None if args.duration else args.num_prompts, duration_s=args.duration,
        input_len=args.random_input_len, output_len=args.random_output_len, range_ratio=range_ratio,
        dataset=args.dataset_path, dataset_kind=kind, prefix_len=args.random_prefix_len,
        num_prefixes=args.num_prefixes, ignore_eos=ignore_eos, warmup_requests=args.num_warmups, slo=_slo(args),
        slo_percentile=args.slo_percentile, percentiles=percentiles, search_capacity=args.search_capacity,
        search_variable=args.search_variable, search_max=args.search_max, search_prompts=args.search_prompts,
        save_result=args.result_dir, seed=args.seed, confirm=args.yes, serve_flags=flags, workers=args.workers,
        label=args.label, plot=args.plot, request_timeout_s=args.request_timeout, simulate=_simulate(args))


def _simulate(args: argparse.Namespace) -> str | None:
    """--simulate and its calibration flags as the one `simulate` field: FILE[,FILE] or probe, then ,verify."""
    sources = [*([args.calibration] if args.calibration else []), *args.from_result]
    if not args.simulate:
        if sources or args.probe or args.verify:
            fail("--calibration, --from, --probe and --verify go with --simulate")
        return None
    if not args.search_capacity:
        fail("--simulate predicts a capacity search: add --search-capacity and an SLO")
    if bool(sources) + args.probe != 1 or (args.calibration and args.from_result):
        fail("--simulate needs one calibration: --calibration FILE, --from RESULT (repeatable) or --probe")
    if any("," in s for s in sources):
        fail("--simulate: a calibration or result path may not contain a comma")
    return ",".join([*sources, *(["probe"] if args.probe else []), *(["verify"] if args.verify else [])])


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
    from vllm_tune.tools.bench.render import render_summary

    req = _input(args)
    bar = _Bar()
    stopping = [False]

    async def main() -> Any:
        loop = asyncio.get_running_loop()

        def on_stop_signal(sig: signal.Signals) -> None:
            if stopping[0]:
                raise KeyboardInterrupt
            stopping[0] = True
            sys.stderr.write(f"\nvllm-tune: {sig.name}: stopping; finished requests are kept (Ctrl-C again to "
                             "abort)\n")

        # SIGTERM (kill, systemd, docker stop) and SIGHUP (a closed terminal) end the run as Ctrl-C does: the
        # requests that finished are saved and status.json says cancelled.
        handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        for sig in handled:
            loop.add_signal_handler(sig, on_stop_signal, sig)
        try:
            return await run_benchmark(req, report=bar, stop=lambda: stopping[0])
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)

    out = asyncio.run(main())
    bar.end()
    if args.save_result and out.result_path:
        _copy_result(out.result_path, args)
    if args.json:
        print_json(out)
    else:
        print(render_summary(out))
    return EXIT_INTERRUPTED if out.state == "cancelled" else 0


def _copy_result(result_path: str, args: argparse.Namespace) -> None:
    """--save-result: the run's result JSON also under vllm bench serve's directory and file name."""
    import shutil
    from datetime import datetime
    from pathlib import Path

    name = args.result_filename
    if not name:
        rate = "inf" if args.request_rate == float("inf") else f"{args.request_rate:g}"
        cap = f"-concurrency{args.max_concurrency}" if args.max_concurrency else ""
        model = (args.model or "model").split("/")[-1]
        name = f"{args.backend}-{rate}qps{cap}-{model}-{datetime.now():%Y%m%d-%H%M%S}.json"
    target = Path(args.result_dir or ".") / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(result_path, target)
    print(f"result also saved to {target}", file=sys.stderr)
