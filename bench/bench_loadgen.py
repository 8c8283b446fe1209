"""Load-generator benchmark: vllm-tune's client vs `vllm bench serve` (and GuideLLM) in one run.

Not run in CI. Against the zero-work streaming test server (tests/support_bench) it measures, per client:
  1. the highest Poisson rate it sustains: achieved >= 98 % of the target and p99 TTFT <= --ttft-limit-ms
     (on a zero-work server any TTFT is client delay); for vllm-tune also p99 schedule lag <= 2 ms;
     GuideLLM is not run at higher rates after it failed two in a row;
  2. TTFT / ITL bias against injected delays (TTFT 20 ms, ITL 2 ms), each client at half of its own sustained
     rate (vllm-tune also at each peer's rate, for a like-for-like ratio), net of the test server's own emit
     lateness in the same window (which it reports), with --bias-tokens per response
     (default 4: at ~1,000 req/s, 16-token streams are 16k events/s, which saturate the one-process test
     server on 2 cores -- it ran 1.4 ms late on first tokens and 2.9 ms on later ones -- so the bias
     measured the box, not the client; the server's CPU share is printed);
  3. client CPU seconds per 1,000 requests;
  4. memory over one long run (default 100k requests): vllm-tune's RSS at every tenth of the run and its growth
     per 1,000 requests (finished requests are kept packed, ~0.1 KiB each, for exact percentiles), next to
     vllm bench serve's peak RSS at two run sizes.
The server's CPU use is printed so it is visibly not the bottleneck. Ratios are printed at the end.

GuideLLM runs when its venv exists (~/.cache/vllm-tune/peers/guidellm; --install-peers creates it). It needs
a local Hugging Face tokenizer for its synthetic prompts (no hub access here): --tokenizer defaults to the tiny
test model's folder, which vllm bench serve uses too. Its send lag and achieved rate come from the per-request
`targeted_start` / `request_start` timings in its JSON report.

  .venv/bin/python bench/bench_loadgen.py --short             # 3-4 minutes on 2 cores, ~5 more with GuideLLM
  .venv/bin/python bench/bench_loadgen.py --short --install-peers   # installs GuideLLM into its own venv first
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support_bench import start_stream_server  # noqa: E402

from vllm_tune.tools.bench.arrivals import rate_schedule  # noqa: E402
from vllm_tune.tools.bench.client import build_body  # noqa: E402
from vllm_tune.tools.bench.metrics import compute_metrics, percentile  # noqa: E402
from vllm_tune.tools.bench.runner import LoadPlan, Progress, check_schedule, choose_workers, run_load  # noqa: E402

VLLM_PY = Path.home() / ".cache/vllm-tune/testenv/vllm-0.32.0/bin/python"
VLLM_CLI = Path(__file__).resolve().parents[1] / "tests" / "support" / "vllm_cli.py"
PEERS = Path.home() / ".cache/vllm-tune/peers"
TINY_LLAMA = Path.home() / ".cache/vllm-tune/testenv/tiny-models-v1/tiny-llama"
PROMPT = " ".join(f"t{10 + i}" for i in range(15))  # 16 tokens with BOS on the test server


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


async def ours(url: str, rate: float, n: int, tokens: int, seed: int = 0,
               workers: int | None = None) -> dict[str, Any]:
    bodies = [build_body("completions", "test-model", PROMPT, tokens, ignore_eos=True)] * n
    plan = LoadPlan(url, "completions", bodies, rate_schedule(n, rate, seed=seed), None, None, 60.0, 10.0)
    w = choose_workers(plan, workers)
    outcome = await run_load(plan, workers=w, stop=lambda: False, progress=Progress(n))
    m = compute_metrics(outcome.records, outcome.duration, percentiles=[99.0])
    check = check_schedule(outcome, plan)
    return {"achieved": check.achieved_send_rate or 0.0, "completed_rate": m["request_throughput"],
            "p99_ttft_ms": m["p99_ttft_ms"], "mean_ttft_ms": m["mean_ttft_ms"], "mean_itl_ms": m["mean_itl_ms"],
            "p99_lag_ms": check.p99_lag_ms, "p50_lag_ms": check.p50_lag_ms,
            "cpu_per_1k": check.client_cpu_per_1k_requests_s, "workers": w,
            "failed": m["failed"]}


def vllm_bench(url: str, rate: float, n: int, tokens: int, tokenizer: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cpu0 = children_cpu()
        cmd = [str(VLLM_PY), str(VLLM_CLI), "bench", "serve", "--backend", "vllm", "--base-url", url, "--model",
               "test-model", "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", "16",
               "--random-output-len", str(tokens), "--num-prompts", str(n), "--request-rate", f"{rate:g}",
               "--ignore-eos", "--save-result", "--result-dir", tmp, "--result-filename", "r.json",
               "--percentile-metrics", "ttft,itl", "--metric-percentiles", "99", "--disable-tqdm"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
        cpu = children_cpu() - cpu0
        if proc.returncode != 0:
            return {"error": proc.stderr[-300:]}
        d = json.loads((Path(tmp) / "r.json").read_text())
    # Achieved send rate is not reported; completions per second over the run is the closest measure.
    return {"achieved": d["completed"] / d["duration"], "completed_rate": d["request_throughput"],
            "p99_ttft_ms": d["p99_ttft_ms"], "mean_ttft_ms": d["mean_ttft_ms"], "mean_itl_ms": d["mean_itl_ms"],
            "cpu_total_s": cpu, "failed": d["failed"]}


def install_guidellm(install: bool) -> tuple[Path | None, str]:
    """GuideLLM lives in its own venv (it pulls torch and transformers); returns (executable, status line)."""
    venv = PEERS / "guidellm"
    exe = venv / "bin" / "guidellm"
    if not exe.exists() and install:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        proc = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "guidellm"], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            return None, f"GuideLLM not measured: pip install guidellm failed: {proc.stderr.strip()[-200:]}"
    if not exe.exists():
        return None, f"GuideLLM not measured: no venv at {venv} (run with --install-peers)"
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=False).stdout.strip()
    return exe, f"GuideLLM: {version or 'unknown version'} from {venv}"


def guidellm_run(exe: Path, url: str, rate: float, n: int, tokens: int, tokenizer: Path,
                 kind: str = "poisson") -> dict[str, Any]:
    """One fixed-rate GuideLLM run (0.8 CLI: `guidellm run` with kind=... option groups).

    GuideLLM builds synthetic prompts with a Hugging Face tokenizer, so one must be given as a local folder
    (no hub access here). Its per-request timings (`targeted_start`, `request_start`, wall clock) give the
    same schedule measures we compute for ourselves: send lag and achieved send rate."""
    with tempfile.TemporaryDirectory() as tmp:
        cpu0 = children_cpu()
        cmd = [str(exe), "run",
               "--backend", f"kind=openai_http,target={url},model=test-model,request_format=/v1/completions",
               "--profile", f"kind={kind},rate={rate:g}", "--constraint", f"kind=max_requests,count={n}",
               "--tokenizer", f"kind=hf_auto,model={tokenizer}",
               "--data", f"kind=synthetic_text,prompt_tokens=16,output_tokens={tokens}",
               "--output", f"kind=json,path={tmp}/g.json", "--disable-console"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
        cpu = children_cpu() - cpu0
        out = Path(f"{tmp}/g.json")
        if proc.returncode != 0 or not out.exists():
            return {"error": " ".join((proc.stderr or proc.stdout).split())[-300:]}
        report = json.loads(out.read_text())
    bench = report["benchmarks"][0]
    metrics, reqs = bench["metrics"], bench["requests"]
    infos = [r["info"] for r in reqs["successful"]]
    starts = sorted(i["timings"]["request_start"] for i in infos if i["timings"].get("request_start"))
    # A few requests carry no real target (seen: values near 0); only targets inside the run count.
    planned = [(i["timings"]["request_start"], i["timings"]["targeted_start"]) for i in infos
               if i["timings"].get("request_start") and (i["timings"].get("targeted_start") or 0.0)
               >= i["scheduler_start_time"] - 1.0]
    lags = sorted(max(0.0, start - target) * 1000 for start, target in planned)
    targets = sorted(target for _, target in planned)
    span = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    target_span = targets[-1] - targets[0] if len(targets) > 1 else 0.0
    ttft, itl = metrics["time_to_first_token_ms"]["successful"], metrics["inter_token_latency_ms"]["successful"]
    return {"achieved": (len(starts) - 1) / span if span > 0 else 0.0,
            "scheduled": (len(targets) - 1) / target_span if target_span > 0 else 0.0,
            "p99_lag_ms": percentile(lags, 99.0), "untargeted": len(infos) - len(planned),
            "p99_ttft_ms": ttft["percentiles"]["p99"],
            "mean_ttft_ms": ttft["mean"], "mean_itl_ms": itl["mean"], "cpu_total_s": cpu,
            "failed": len(reqs["errored"]) + len(reqs["incomplete"]),
            "workers": bench["config"]["strategy"].get("worker_count")}


def window_lag(before: dict[str, Any], after: dict[str, Any]) -> float:
    """The test server's mean first-token lateness (ms) between two /debug/stats snapshots."""
    count = after["first_emits"] - before["first_emits"]
    return (after["first_emit_lag_sum_ms"] - before["first_emit_lag_sum_ms"]) / count if count else 0.0


def holds(rate: float, r: dict[str, Any], ttft_limit: float, lag_limit: float | None) -> bool:
    """Whether one run held its rate. A Poisson sample of n arrivals has a realised rate within about
    2/sqrt(n) of the nominal one, so 'achieved >= 98 %' is checked against the nominal rate less that."""
    allowance = 1.0 - 2.0 / max(1.0, r.get("n", 1)) ** 0.5
    return "error" not in r and not r.get("failed") and r["achieved"] >= 0.98 * rate * allowance \
        and r["p99_ttft_ms"] <= ttft_limit and (lag_limit is None or r.get("p99_lag_ms", 0.0) <= lag_limit)


def sustained(results: dict[float, dict[str, Any]], ttft_limit: float, lag_limit: float | None) -> float:
    """Highest rate held."""
    best = 0.0
    for rate, r in sorted(results.items()):
        if holds(rate, r, ttft_limit, lag_limit):
            best = rate
    return best


def given_up(results: dict[float, dict[str, Any]], ttft_limit: float) -> bool:
    """GuideLLM (~1 min a run) is not run at higher rates once it failed the two highest tried so far."""
    tried = sorted(results.items())[-2:]
    return len(tried) == 2 and not any(holds(rate, r, ttft_limit, None) for rate, r in tried)


def default_tokenizer() -> str:
    """The tiny test model's tokenizer, when the test environment has been built."""
    return str(TINY_LLAMA) if (TINY_LLAMA / "tokenizer.json").exists() else ""


def peer_line(name: str, rate: float, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"  {name:10} {rate:6.0f} req/s: failed: {r['error']}"
    lag = f"p99 lag {r['p99_lag_ms']:6.2f} ms " if "p99_lag_ms" in r else ""
    workers = f"  workers {r['workers']}" if r.get("workers") else ""
    if r.get("scheduled"):
        workers += f"  (its own schedule: {r['scheduled']:.1f}/s"
        workers += f", {r['untargeted']} without a target)" if r.get("untargeted") else ")"
    return (f"  {name:10} {rate:6.0f} req/s: sent {r['achieved']:7.1f}/s {lag}p99 TTFT {r['p99_ttft_ms']:6.2f} ms  "
            f"CPU total {r['cpu_total_s']:.1f} s (incl. imports){workers}")


def half_of(held: dict[str, float], name: str) -> float:
    return max(50.0, held.get(name, 0.0) / 2)


def bias_runs(args: argparse.Namespace, held: dict[str, float], run_vllm: bool, tokenizer: Path | None,
              guidellm: Path | None) -> tuple[dict[str, float], dict[str, float], float, float]:
    """TTFT/ITL bias runs; returns (bias per client, vllm-tune's bias at each peer's rate, CPU/1k of vllm-tune
    and of vllm bench serve, both at vllm bench serve's rate when it ran)."""
    bt = args.bias_tokens
    print(f"\nbias against injected TTFT 20 ms / ITL 2 ms, {bt} tokens per response, each client at half of its "
          "own sustained rate (at least 50 req/s), net of the server's lateness in the same window:")
    bias: dict[str, float] = {}  # vllm-tune's is at its own half rate
    same_rate: dict[str, float] = {}  # vllm-tune's bias at each peer's rate

    def run_ours(srv: Any, rate: float) -> tuple[dict[str, Any], float, float]:
        before, cpu0, t0 = srv.stats(), srv.cpu_seconds(), time.monotonic()
        r = asyncio.run(ours(srv.url, rate, int(rate * args.seconds * 2), bt, seed=1))
        share = (srv.cpu_seconds() - cpu0) / (time.monotonic() - t0)
        return r, window_lag(before, srv.stats()), share

    with start_stream_server(20, 2, procs=args.server_procs) as srv:
        half = half_of(held, "vllm-tune")
        r, lag_first, server_share = run_ours(srv, half)
        s = srv.stats()
        print(f"  test server's own emit lateness (whole run so far): first token {s['first_emit_lag_ms']:.2f} ms, "
              f"later tokens {s['token_emit_lag_ms']:.2f} ms; server CPU {server_share:.2f} cores during vllm-tune")
        bias["vllm-tune"] = r["mean_ttft_ms"] - 20 - lag_first
        ours_cpu = r["cpu_per_1k"]
        print(f"  vllm-tune         {half:6.0f} req/s: TTFT bias {bias['vllm-tune']:+6.2f} ms, ITL bias "
              f"{r['mean_itl_ms'] - 2:+6.3f} ms, p50/p99 lag {r['p50_lag_ms']:.2f}/{r['p99_lag_ms']:.2f} ms, "
              f"CPU/1k {ours_cpu:.2f} s (server lateness {lag_first:.2f} ms)")
        vllm_cpu = 0.0
        if run_vllm and tokenizer is not None:
            rate = half_of(held, "vllm bench serve")
            n = int(rate * args.seconds * 2)
            # CPU per request net of vLLM's ~11 s of imports: difference between a run of n and one of 3n.
            before = srv.stats()
            v = vllm_bench(srv.url, rate, n, bt, tokenizer)
            s2 = window_lag(before, srv.stats())
            v3 = vllm_bench(srv.url, rate, 3 * n, bt, tokenizer)
            if "error" not in v and "error" not in v3:
                vllm_cpu = (v3["cpu_total_s"] - v["cpu_total_s"]) * 1000 / (2 * n)
                bias["vllm bench serve"] = v["mean_ttft_ms"] - 20 - s2
                print(f"  vllm bench serve  {rate:6.0f} req/s: TTFT bias {bias['vllm bench serve']:+6.2f} ms, ITL "
                      f"bias {v['mean_itl_ms'] - 2:+6.3f} ms, CPU/1k {vllm_cpu:.2f} s (from runs of {n} and {3 * n} "
                      f"requests; server lateness {s2:.2f} ms)")
                r2, lag2, _ = run_ours(srv, rate)
                same_rate["vllm bench serve"] = r2["mean_ttft_ms"] - 20 - lag2
                ours_cpu = r2["cpu_per_1k"]  # the CPU ratio compares the two clients at one rate
                print(f"  vllm-tune         {rate:6.0f} req/s: TTFT bias {same_rate['vllm bench serve']:+6.2f} ms, "
                      f"ITL bias {r2['mean_itl_ms'] - 2:+6.3f} ms, CPU/1k {r2['cpu_per_1k']:.2f} s (same rate)")
            else:
                print(f"  vllm bench serve  failed: {v.get('error') or v3.get('error')}")
        if guidellm is not None and tokenizer is not None:
            rate = half_of(held, "guidellm")
            before = srv.stats()
            # At most 1,500 requests: GuideLLM builds every prompt with the tokenizer before it starts.
            g = guidellm_run(guidellm, srv.url, rate, min(int(rate * args.seconds * 2), 1500), bt, tokenizer)
            s3 = window_lag(before, srv.stats())
            if "error" in g:
                print(f"  guidellm          failed: {g['error']}")
            else:
                bias["guidellm"] = g["mean_ttft_ms"] - 20 - s3
                print(f"  guidellm          {rate:6.0f} req/s: TTFT bias {bias['guidellm']:+6.2f} ms, ITL bias "
                      f"{g['mean_itl_ms'] - 2:+6.3f} ms, p99 send lag {g['p99_lag_ms']:.2f} ms, sent "
                      f"{g['achieved']:.1f}/s (server lateness {s3:.2f} ms)")
                r3, lag3, _ = run_ours(srv, rate)
                same_rate["guidellm"] = r3["mean_ttft_ms"] - 20 - lag3
                print(f"  vllm-tune         {rate:6.0f} req/s: TTFT bias {same_rate['guidellm']:+6.2f} ms, "
                      f"ITL bias {r3['mean_itl_ms'] - 2:+6.3f} ms, CPU/1k {r3['cpu_per_1k']:.2f} s (same rate)")

    return bias, same_rate, ours_cpu, vllm_cpu


def rss_sampler(progress: Progress, marks: list[int], out: list[tuple[int, float]], halt: threading.Event) -> None:
    """Record (requests done, RSS MiB) as the run passes each mark."""
    pending = list(marks)
    while pending and not halt.is_set():
        if progress.done >= pending[0]:
            out.append((progress.done, rss_mb()))
            pending.pop(0)
        time.sleep(0.05)


def peer_peak_rss(cmd: list[str], env: dict[str, str]) -> float:
    """Peak RSS (MiB) of a peer process, polled from /proc while it runs."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0.0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
        except OSError:
            pass
        time.sleep(0.1)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.read() if proc.stderr else "")[-300:])
    return peak


def vllm_bench_memory(url: str, n: int, tokens: int, tokenizer: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(VLLM_PY), str(VLLM_CLI), "bench", "serve", "--backend", "vllm", "--base-url", url, "--model",
               "test-model", "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", "16",
               "--random-output-len", str(tokens), "--num-prompts", str(n), "--request-rate", "inf",
               "--max-concurrency", "32", "--ignore-eos", "--save-result", "--result-dir", tmp,
               "--result-filename", "r.json", "--disable-tqdm"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        return peer_peak_rss(cmd, env)


def memory_runs(args: argparse.Namespace, run_vllm: bool, tokenizer: Path | None) -> None:
    """One long open-loop run with RSS read at every tenth of it; vllm bench serve's peak RSS at two sizes."""
    n = args.memory_requests
    print(f"\nmemory: {n} requests at {args.memory_rate:g} req/s in one run (vllm-tune, one process, "
          f"{args.tokens} tokens each):")
    marks = [n * k // 10 for k in range(1, 11)]
    samples: list[tuple[int, float]] = []
    halt = threading.Event()
    with start_stream_server(0, 0, procs=args.server_procs) as srv:
        asyncio.run(ours(srv.url, args.memory_rate, 1000, args.tokens, seed=9, workers=1))  # warm the code paths
        gc.collect()
        before = rss_mb()
        bodies = [build_body("completions", "test-model", PROMPT, args.tokens, ignore_eos=True)] * n
        plan = LoadPlan(srv.url, "completions", bodies, rate_schedule(n, args.memory_rate, seed=11), None, None,
                        60.0, 10.0)
        progress = Progress(n)
        sampler = threading.Thread(target=rss_sampler, args=(progress, marks, samples, halt), daemon=True)
        sampler.start()
        outcome = asyncio.run(run_load(plan, workers=1, stop=lambda: False, progress=progress))
        halt.set()
        sampler.join()
        check = check_schedule(outcome, plan)
        m = compute_metrics(outcome.records, outcome.duration, percentiles=[99.0])
        after_metrics = rss_mb()
    print(f"  before the run (plan not built yet): RSS {before:6.1f} MiB")
    for done, mib in samples:
        print(f"  after {done:7d} requests: RSS {mib:6.1f} MiB")
    print(f"  after computing the metrics: RSS {after_metrics:6.1f} MiB; sent {check.achieved_send_rate or 0:.1f} "
          f"req/s, p99 lag {check.p99_lag_ms:.2f} ms, completed {m['completed']}, failed {m['failed']}")
    ours_per_1k = None
    if len(samples) >= 2:
        (d0, r0), (d1, r1) = samples[0], samples[-1]
        ours_per_1k = (r1 - r0) * 1024 * 1000 / max(1, d1 - d0)
        print(f"  growth from {d0} to {d1} requests: {r1 - r0:+.1f} MiB ({ours_per_1k:.0f} KiB per 1,000 requests)")
    if not (run_vllm and tokenizer is not None):
        return
    small, large = max(1000, n // 50), max(5000, n // 5)
    with start_stream_server(0, 0, procs=args.server_procs) as srv:
        try:
            peaks = {k: vllm_bench_memory(srv.url, k, args.tokens, tokenizer) for k in (small, large)}
        except RuntimeError as exc:
            print(f"  vllm bench serve memory not measured: {exc}")
            return
    vllm_per_1k = (peaks[large] - peaks[small]) * 1024 * 1000 / (large - small)
    print(f"  vllm bench serve peak RSS: {peaks[small]:.1f} MiB for {small} requests, {peaks[large]:.1f} MiB for "
          f"{large}: {vllm_per_1k:.0f} KiB per 1,000 requests")
    if ours_per_1k is not None and ours_per_1k > 0:
        print(f"  ratio: vllm bench serve grows {vllm_per_1k / ours_per_1k:.1f}x as much per request")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--short", action="store_true", help="fewer rates and a 20k-request memory run")
    ap.add_argument("--rates", default="200,400,800,1200,1600,2000,2400")
    ap.add_argument("--seconds", type=float, default=4.0, help="load seconds per rate step")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--ttft-limit-ms", type=float, default=5.0)
    ap.add_argument("--server-procs", type=int, default=1)
    ap.add_argument("--bias-tokens", type=int, default=4, help="tokens per response in the bias runs")
    ap.add_argument("--memory-requests", type=int, default=100_000, help="requests in the one long memory run")
    ap.add_argument("--memory-rate", type=float, default=800.0)
    ap.add_argument("--memory-only", action="store_true", help="only the long memory run")
    ap.add_argument("--skip-vllm", action="store_true")
    ap.add_argument("--skip-guidellm", action="store_true", help="do not run GuideLLM even if its venv exists")
    ap.add_argument("--install-peers", action="store_true", help="install GuideLLM into its own venv if missing")
    ap.add_argument("--tokenizer", default=default_tokenizer(),
                    help="local tokenizer folder for vllm bench serve and GuideLLM (default: the tiny test model)")
    args = ap.parse_args()
    if args.short:
        args.rates, args.seconds, args.memory_requests = "200,400,600,800,1200,1600,2000", 3.0, 20_000
    rates = [float(r) for r in args.rates.split(",")]
    tokenizer = Path(args.tokenizer) if args.tokenizer else None
    run_vllm = not args.skip_vllm and VLLM_PY.exists() and tokenizer is not None
    if args.memory_only:
        memory_runs(args, run_vllm, tokenizer)
        return
    guidellm: Path | None = None
    if not args.skip_guidellm:
        guidellm, status = install_guidellm(args.install_peers)
        if guidellm is not None and tokenizer is None:
            guidellm, status = None, ("GuideLLM not measured: it needs a Hugging Face tokenizer to build its "
                                      "synthetic prompts and this machine has no hub access; pass --tokenizer DIR")
        print(status)
    table: dict[str, dict[float, dict[str, Any]]] = {"vllm-tune": {}, "vllm bench serve": {}, "guidellm": {}}

    with start_stream_server(0, 0, procs=args.server_procs) as srv:
        print(f"zero-work server: {srv.url}, {args.server_procs} process(es), {args.tokens} tokens per response")
        for rate in rates:
            n = int(rate * args.seconds)
            cpu0, t0 = srv.cpu_seconds(), time.monotonic()
            r = asyncio.run(ours(srv.url, rate, n, args.tokens))
            r["server_cpu_share"] = (srv.cpu_seconds() - cpu0) / (time.monotonic() - t0)
            r["n"] = n
            table["vllm-tune"][rate] = r
            print(f"  vllm-tune  {rate:6.0f} req/s: sent {r['achieved']:7.1f}/s "
                  f"lag p50/p99 {r['p50_lag_ms']:4.2f}/{r['p99_lag_ms']:5.2f} ms "
                  f"p99 TTFT {r['p99_ttft_ms']:6.2f} ms  CPU/1k {r['cpu_per_1k']:.2f} s  workers {r['workers']}  "
                  f"server CPU {r['server_cpu_share']:.2f} cores")
            if run_vllm and tokenizer is not None:
                v = vllm_bench(srv.url, rate, n, args.tokens, tokenizer)
                v["n"] = n
                table["vllm bench serve"][rate] = v
                print(peer_line("vllm bench", rate, v).replace(" sent ", " done "))
            if guidellm is not None and tokenizer is not None and not given_up(table["guidellm"], args.ttft_limit_ms):
                g = guidellm_run(guidellm, srv.url, rate, n, args.tokens, tokenizer)
                g["n"] = n
                table["guidellm"][rate] = g
                print(peer_line("guidellm", rate, g))
        print(f"server CPU over the whole comparison: {srv.cpu_seconds():.1f} s")

    held = {name: sustained(res, args.ttft_limit_ms, 2.0 if name == "vllm-tune" else None)
            for name, res in table.items() if res}
    print("\nhighest sustained Poisson rate (>= 98 % achieved, p99 TTFT <= "
          f"{args.ttft_limit_ms:g} ms on a zero-work server; vllm-tune also p99 lag <= 2 ms):")
    # Throughput alone (no latency limit): how fast each client can send at all, whatever it adds to TTFT.
    sends = {name: sustained(res, math.inf, None) for name, res in table.items() if res}
    for name, value in held.items():
        print(f"  {name:18} {value:7.0f} req/s   (throughput only, no TTFT/lag limit: {sends[name]:.0f} req/s)")

    bias, same_rate, ours_cpu, vllm_cpu = bias_runs(args, held, run_vllm, tokenizer, guidellm)
    tune_held = held.get("vllm-tune", 0.0)
    print("\nratios (vllm-tune / peer):")
    for peer in ("vllm bench serve", "guidellm"):
        if peer not in held:
            continue
        peer_held = held[peer]
        rate_ratio = f"{tune_held / peer_held:.2f}x" if peer_held else f"{tune_held:g} vs 0 req/s"
        extra = f", CPU per request {ours_cpu / vllm_cpu:.2f}x" if peer == "vllm bench serve" and vllm_cpu else ""
        peer_bias = f"{bias[peer]:+.2f}" if peer in bias else "n/a"
        ours_bias = f"{same_rate[peer]:+.2f}" if peer in same_rate else "n/a"
        send_ratio = f"{sends['vllm-tune'] / sends[peer]:.2f}x" if sends.get(peer) else "n/a"
        print(f"  vs {peer:16}: sustained rate {rate_ratio} (throughput only {send_ratio}){extra}, TTFT bias at "
              f"{half_of(held, peer):g} req/s {ours_bias} vs {peer_bias} ms")
    print(f"  vllm-tune's TTFT bias at its own half rate ({half_of(held, 'vllm-tune'):g} req/s): "
          f"{bias['vllm-tune']:+.2f} ms (target < 0.5 ms)")

    memory_runs(args, run_vllm, tokenizer)

if __name__ == "__main__":
    main()
