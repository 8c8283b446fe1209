"""Where each request's TTFT goes on the suite's vLLM CPU server, request by request, from client to engine and back.

bench/bench_ttft_split.py splits the server's mean TTFT with its own histograms (queue, prefill, the rest). This
script times every request at each hand-over instead: it starts vLLM with bench/request_trace/ on its
PYTHONPATH, whose sitecustomize timestamps the API process's add_request and each batch of engine outputs it
takes (with the engine core's QUEUED/SCHEDULED events), and sends the load with a small streaming client that
tags each request with X-Request-Id. All clocks are the host's monotonic clock. Per load and budget it prints
the mean of each leg in ms:

  client->API   send until the API process calls add_request (HTTP, parsing, tokenizing the prompt)
  intake        inside add_request (input processing, on its way to the engine core)
  ->queued      until the engine core queues it (the hop, and the wait for the running step to end)
  queue         queued until first scheduled
  prefill       first scheduled until the engine core's batch with the first token
  ->API         until the API process takes that batch
  API->client   until the client reads the first token

After the legs it compares the engine's own step times (from one batch of outputs to the next) at the same mix of
decoding and prefilling requests, without and with a request in intake (between the client's send and the
engine core's queue): on the suite's 2-core host the API server's work on a new request takes cores the
engine's forward pass would use.

It is the measurement behind what_if's hand-off (knowledge/entries/whatif.yaml, whatif.calibration-log). Run it
under the shared lock on an otherwise idle box:

    flock /tmp/vllm-tune-integration.lock .venv/bin/python bench/bench_request_path.py [--pinned] [--intake]

--pinned runs the engine core on cores of its own and the API server and client on the others, as the what_if
accuracy protocol does.

--intake measures the API server's intake queue instead, as what_if's accuracy protocol runs its concurrency-48
case: the engine core on a core of its own (tests/support/cpu_split.py), closed loops of 48 requests of 192 in /
96 out sent with run_benchmark's own streaming transport (each tagged), and prints how far apart the requests of
a wave reach add_request, beside the legs above (what_if's StepModel.intake_gap_s), then the requests after the
first wave by their place in the bursts they were sent in, and each wave's spread and waits; `--concurrency N` runs
the same load with N streams (3 N requests), `--load C,N,IN,OUT` another closed loop (concurrency, requests, input
and output tokens) and `--budget B` sets the server's --max-num-batched-tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import httpx
from support.cpu_split import on_frontend_cores, split_cores
from support.tiny_models import ensure_tiny_models
from support.vllm_server import start_vllm

from vllm_tune.tools.bench.client import build_body
from vllm_tune.tools.bench.records import RequestRecord
from vllm_tune.tools.bench.transport import StreamingPool
from vllm_tune.tools.bench.workloads import ServerTokenizer, build_random
from vllm_tune.tools.net.http import SecretRedactor

TRACE_DIR = Path(__file__).resolve().parent / "request_trace"
INPUT_LEN, OUTPUT_LEN, REQUESTS, SKIP = 700, 48, 96, 8  # SKIP: the first requests (a closed loop's first wave)
LOADS: list[tuple[str, dict[str, float]]] = [("closed loop c=8", {"concurrency": 8}),
                                             ("Poisson 30 req/s", {"rate": 30.0})]
BUDGETS = [None, "256"]  # None: vLLM's default for the CPU backend
LEGS = ["client->API", "intake", "->queued", "queue", "prefill", "->API", "API->client"]
QUEUED, SCHEDULED = 1, 2  # EngineCoreEventType values at vLLM 0.32.0
MAX_STEP_MS = 60.0  # longer gaps between output batches are idle time (the tiny model's steps take 2-25 ms)


async def send_load(url: str, model: str, tag: str, seed: int, load: dict[str, float]) -> list[dict[str, Any]]:
    """Send REQUESTS prompts, each tagged `tag-i`; return per request its send and first-token times."""
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=256)) as client:
        items, _ = await build_random(ServerTokenizer(client, model, chat=False), n=REQUESTS,
                                      input_lens=[INPUT_LEN] * REQUESTS, output_lens=[OUTPUT_LEN] * REQUESTS,
                                      seed=seed)
        records: list[dict[str, Any]] = []

        async def one(i: int) -> None:
            body = build_body("completions", model, items[i].prompt, OUTPUT_LEN, ignore_eos=True)
            rec: dict[str, Any] = {"id": f"{tag}-{i}", "i": i, "send": time.monotonic(), "first": None}
            headers = {"Content-Type": "application/json", "X-Request-Id": rec["id"]}
            async with client.stream("POST", "/v1/completions", content=body, headers=headers) as resp:
                async for line in resp.aiter_lines():
                    if rec["first"] is None and line.startswith("data: {"):
                        choices = json.loads(line[6:]).get("choices") or [{}]
                        if choices[0].get("text"):  # the first token with text, as TTFT counts it
                            rec["first"] = time.monotonic()
            records.append(rec)

        if "concurrency" in load:
            pending = iter(range(REQUESTS))

            async def seat() -> None:
                for i in pending:
                    await one(i)

            await asyncio.gather(*(seat() for _ in range(int(load["concurrency"]))))
        else:
            rng, tasks = random.Random(seed), []
            for i in range(REQUESTS):
                tasks.append(asyncio.create_task(one(i)))
                await asyncio.sleep(rng.expovariate(load["rate"]))
            await asyncio.gather(*tasks)
        return records


@dataclass
class Trace:
    """What the sitecustomize wrote, by the request id vLLM was given (its engine-side id carries one more suffix)."""

    adds: dict[str, tuple[float, float]] = field(default_factory=dict)  # add_request (entered, left)
    events: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))  # engine events
    first: dict[str, tuple[float, float]] = field(default_factory=dict)  # (engine time, taken) of the first token
    batches: list[tuple[float, list[str]]] = field(default_factory=list)  # engine time, ids with tokens; in order


def engine_id(rec: dict[str, Any]) -> str:
    """The request id vLLM 0.32.0's completions handler gives a one-prompt request tagged with X-Request-Id."""
    return f"cmpl-{rec['id']}-0"


def read_trace(path: Path) -> Trace:
    out = Trace()
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "add":
            out.adds[rec["id"]] = (rec["entered"], rec["left"])
            continue
        ids = []
        for core_id, new_tokens, evs in rec["requests"]:
            rid = core_id.rsplit("-", 1)[0]  # the engine core adds one more suffix
            for kind, ts in evs:
                out.events[rid].setdefault(kind, ts)
            if new_tokens:
                ids.append(rid)
                if rid not in out.first:
                    out.first[rid] = (rec["engine"], rec["taken"])
        out.batches.append((rec["engine"], ids))
    out.batches.sort()
    return out


def legs(records: list[dict[str, Any]], trace: Trace) -> tuple[dict[str, list[float]], int]:
    adds, events, first = trace.adds, trace.events, trace.first
    out: dict[str, list[float]] = defaultdict(list)
    missing = 0
    for rec in records:
        if rec["i"] < SKIP:
            continue
        rid = engine_id(rec)
        ev, fo = events.get(rid, {}), first.get(rid)
        if rid not in adds or QUEUED not in ev or SCHEDULED not in ev or fo is None or rec["first"] is None:
            missing += 1
            continue
        entered, left = adds[rid]
        stamps = [rec["send"], entered, left, ev[QUEUED], ev[SCHEDULED], fo[0], fo[1], rec["first"]]
        for name, a, b in zip(LEGS, stamps, stamps[1:], strict=False):
            out[name].append((b - a) * 1e3)
        out["ttft"].append((rec["first"] - rec["send"]) * 1e3)
    return out, missing


def step_times(trace: Trace, records: list[dict[str, Any]]) -> list[tuple[float, int, int, float]]:
    """The engine's steps while these records' load ran: (ms, decoding requests, requests prefilling, requests in
    intake). A step runs from one batch of engine outputs to the next (gaps over MAX_STEP_MS are idle time, not
    steps); decoding: requests with a token in the batch after an earlier one; prefilling: requests scheduled and
    not past their first token before the step ends (chunked prompts take several steps); intake: requests between
    the client's send and the engine core's queue, each counted for the share of the step it overlaps."""
    events, batches = trace.events, trace.batches
    first: dict[str, int] = {}
    for i, (_, ids) in enumerate(batches):
        for rid in ids:
            first.setdefault(rid, i)
    intake = [(rec["send"], events[rid][QUEUED]) for rec in records
              if QUEUED in events.get(rid := engine_id(rec), {})]
    ours = {engine_id(rec) for rec in records}
    scheduled = [(events[rid][SCHEDULED], rid) for rid in ours if SCHEDULED in events.get(rid, {})]
    lo = min((s for s, _ in intake), default=math.inf)
    out: list[tuple[float, int, int, float]] = []
    for i in range(1, len(batches)):
        (t0, _), (t1, ids) = batches[i - 1], batches[i]
        ms = (t1 - t0) * 1e3
        if t0 < lo or ms > MAX_STEP_MS or not any(rid in ours for rid in ids):
            continue
        decoding = sum(1 for rid in ids if first[rid] < i)
        prefilling = sum(1 for at, rid in scheduled if at < t1 and first.get(rid, len(batches)) >= i)
        in_intake = sum(min(t1, q) - max(t0, s) for s, q in intake if q > t0 and s < t1) / (t1 - t0)
        out.append((ms, decoding, prefilling, in_intake))
    return out


def contention_rows(steps: list[tuple[float, int, int, float]], min_steps: int = 5) -> list[str]:
    """Median step time at the same mix of decoding and prefilling requests, with no request in intake against
    at least half a request in intake: what the API server's intake work costs the engine on shared cores."""
    groups: dict[tuple[int, int], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for ms, decoding, prefilling, in_intake in steps:
        if in_intake == 0:
            groups[(decoding, prefilling)][0].append(ms)
        elif in_intake >= 0.5:
            groups[(decoding, prefilling)][1].append(ms)
    rows, extra = [], []
    for (decoding, prefilling), (idle, busy) in sorted(groups.items()):
        if len(idle) >= min_steps and len(busy) >= min_steps:
            a, b = statistics.median(idle), statistics.median(busy)
            extra.append(b - a)
            rows.append(f"{decoding} decoding, {prefilling} prefilling: {a:.2f} ms ({len(idle)} steps) without, "
                        f"{b:.2f} ms ({len(busy)}) with a request in intake ({b - a:+.2f} ms)")
    if extra:
        rows.insert(0, f"over {len(extra)} mixes seen both ways: {statistics.median(extra):+.2f} ms median "
                       f"({min(extra):+.2f} to {max(extra):+.2f})")
    return rows


async def main(args: argparse.Namespace) -> int:
    model = ensure_tiny_models(build=False).llama
    work = Path(tempfile.mkdtemp(prefix="vllm-tune-request-path-"))
    traces = {b: work / f"trace-{b or 'default'}.jsonl" for b in BUDGETS}
    # --pinned: the engine core on cores of its own, the API server and this client on the others, as what_if's
    # accuracy protocol runs its servers (tests/support/cpu_split.py)
    split = split_cores() if args.pinned else None
    with on_frontend_cores(split):
        servers = [start_vllm(model, [] if b is None else ["--max-num-batched-tokens", b],
                              env={"PYTHONPATH": str(TRACE_DIR), "VLLM_TUNE_REQUEST_TRACE": str(traces[b])},
                              split=split)
                   for b in BUDGETS]
    print(f"mean ms per leg over requests {SKIP + 1}-{REQUESTS} of {INPUT_LEN} in / {OUTPUT_LEN} out; "
          f"TTFT p50 is the client's median; engine core {'pinned apart' if split else 'sharing the cores'}\n")
    print("| load | budget | TTFT p50 | " + " | ".join(LEGS) + " |")
    print("|---|---:|---:|" + "---:|" * len(LEGS))
    seed = 900
    steps: dict[tuple[str, str | None], list[tuple[float, int, int, float]]] = defaultdict(list)
    try:
        for rep in range(2):
            for name, load in LOADS:
                for budget, server in zip(BUDGETS, servers, strict=True):
                    seed += 1
                    with on_frontend_cores(split):
                        records = await send_load(server.url, server.model, f"r{rep}s{seed}", seed, load)
                    trace = read_trace(traces[budget])
                    steps[(name, budget)] += step_times(trace, records)
                    got, missing = legs(records, trace)
                    if not got["ttft"]:
                        print(f"| {name} | {budget or 'default'} | no request traced ({missing} missing) |")
                        continue
                    cells = " | ".join(f"{statistics.fmean(got[leg]):.1f}" for leg in LEGS)
                    print(f"| {name} | {budget or 'default'} | {statistics.median(got['ttft']):.1f} | {cells} |",
                          flush=True)
    finally:
        for server in servers:
            server.stop()
    print("\nEngine step times at the same mix, without and with a request in intake (client send to engine "
          "queue; the API server's work on it shares the cores with the engine):")
    for (name, budget), timed in steps.items():
        print(f"- {name}, budget {budget or 'default'}: {len(timed)} steps")
        for row in contention_rows(timed):
            print(f"  - {row}")
    return 0


INTAKE_LOAD = (48, 144, 192, 96)  # concurrency, requests, input and output tokens: what_if's concurrency-48 case
QUEUED_GAP_MS = 5.0  # consecutive add_request entries closer than this were waiting for each other


async def send_tagged(url: str, model: str, tag: str, seed: int,
                      load: tuple[int, int, int, int] = INTAKE_LOAD) -> list[dict[str, Any]]:
    """A closed loop with run_benchmark's streaming transport (its client cost is the one what_if calibrates with),
    each request tagged `tag-i` with X-Request-Id; per request its send and first-token times."""
    concurrency, n, input_len, output_len = load
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        items, _ = await build_random(ServerTokenizer(client, model, chat=False), n=n, input_lens=[input_len] * n,
                                      output_lens=[output_len] * n, seed=seed)
    pool = StreamingPool(url, max_connections=concurrency, timeout_s=120.0, api_key=None, redact=SecretRedactor(None))
    records: list[dict[str, Any]] = []
    pending = iter(range(n))

    async def seat() -> None:
        for i in pending:
            wire = pool.request_bytes("/v1/completions", build_body("completions", model, items[i].prompt,
                                                                    output_len, ignore_eos=True))
            head, rest = wire.split(b"\r\n", 1)
            rec = RequestRecord(index=i, intended_send=time.perf_counter())
            await pool.send(head + f"\r\nX-Request-Id: {tag}-{i}".encode() + b"\r\n" + rest, rec, chat=False)
            records.append({"id": f"{tag}-{i}", "i": i, "send": rec.start_time,
                            "first": rec.start_time + rec.ttft if rec.success else None,
                            "done": rec.start_time + rec.latency if rec.success else None})

    try:
        await asyncio.gather(*(seat() for _ in range(concurrency)))
    finally:
        pool.close()
    return records


def intake_gaps(records: list[dict[str, Any]], trace: Trace,
                concurrency: int = INTAKE_LOAD[0]) -> tuple[list[float], list[float]]:
    """(ms from the first send of the first wave to each of its requests' add_request, ms between consecutive
    add_request entries of requests that waited for each other after the first wave)."""
    entered = {rec["i"]: trace.adds[rid][0] for rec in records if (rid := engine_id(rec)) in trace.adds}
    first_wave = sorted(t for i, t in entered.items() if i < concurrency)
    start = min(rec["send"] for rec in records)
    later = sorted(t for i, t in entered.items() if i >= concurrency)
    gaps = [(b - a) * 1e3 for a, b in itertools.pairwise(later) if (b - a) * 1e3 < QUEUED_GAP_MS]
    return [(t - start) * 1e3 for t in first_wave], gaps


def waves(records: list[dict[str, Any]], trace: Trace, concurrency: int = INTAKE_LOAD[0]) -> list[str]:
    """Per wave of the closed loop (requests i*c .. i*c + c-1, in the order they were sent): how far apart its
    requests were sent and finished, how long they took to reach add_request, and from the engine core's queue to
    their first token (ms).
    Whether the waves stay in step (sent within a few ms of each other, then queued behind each other's prefills)
    or spread out is what sets the TTFT percentiles of a closed loop; what_if's simulator can be held against these
    rows."""
    start = min(rec["send"] for rec in records)
    out = []
    for w in range(0, max(rec["i"] for rec in records) + 1, concurrency):
        rows = [r for r in records if w <= r["i"] < w + concurrency and r["first"] is not None]
        if not rows:
            continue
        # Queued until the engine core's batch with the first token: the queue and the prefill, as the simulator's
        # time from ready to first token.
        queue = sorted((trace.first[rid][0] - trace.events[rid][QUEUED]) * 1e3 for r in rows
                       if QUEUED in trace.events.get(rid := engine_id(r), {}) and rid in trace.first)
        ttft = sorted((r["first"] - r["send"]) * 1e3 for r in rows)
        intake = [(trace.adds[rid][0] - r["send"]) * 1e3 for r in rows if (rid := engine_id(r)) in trace.adds]
        sends = [(r["send"] - start) * 1e3 for r in rows]
        dones = [(r["done"] - start) * 1e3 for r in rows if r["done"] is not None]
        out.append(f"| {w // concurrency + 1} | {min(sends):.0f}-{max(sends):.0f} | "
                   f"{min(dones):.0f}-{max(dones):.0f} | "
                   f"{statistics.median(intake) if intake else math.nan:.1f} | "
                   f"{statistics.median(queue) if queue else math.nan:.1f} / {max(queue, default=math.nan):.1f} | "
                   f"{statistics.median(ttft):.1f} / {ttft[int(0.9 * (len(ttft) - 1))]:.1f} |")
    return out


BURST_MS = 1.0  # sends closer than this after the one before them count as one burst


def burst_positions(records: list[dict[str, Any]], trace: Trace, concurrency: int) -> list[str]:
    """Rows per place in a burst (0: its first request): how long requests at that place took from the client's send
    to add_request and from the engine core's queue to their first token, and their TTFT (ms, medians). Requests of
    a burst that the API server takes in one after another wait longer the later their place."""
    later = sorted((r for r in records if r["i"] >= concurrency and r["first"] is not None), key=lambda r: r["send"])
    places: dict[int, list[dict[str, Any]]] = defaultdict(list)
    place, prev = 0, -math.inf
    for r in later:
        place = place + 1 if (r["send"] - prev) * 1e3 < BURST_MS else 0
        prev = r["send"]
        places[place].append(r)
    out = []
    for k in sorted(places):
        rows = places[k]
        intake = [(trace.adds[rid][0] - r["send"]) * 1e3 for r in rows if (rid := engine_id(r)) in trace.adds]
        queued = [(trace.first[rid][0] - trace.events[rid][QUEUED]) * 1e3 for r in rows
                  if QUEUED in trace.events.get(rid := engine_id(r), {}) and rid in trace.first]
        ttft = [(r["first"] - r["send"]) * 1e3 for r in rows]
        out.append(f"| {k} | {len(rows)} | {statistics.median(intake) if intake else math.nan:.1f} / "
                   f"{statistics.fmean(intake) if intake else math.nan:.1f} | "
                   f"{statistics.median(queued) if queued else math.nan:.1f} | {statistics.median(ttft):.1f} |")
    return out


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def _load(text: str) -> tuple[int, int, int, int]:
    parts = text.split(",")
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"expected C,N,IN,OUT (four numbers), got {text!r}")
    c, n, i, o = (_positive(v.strip()) for v in parts)
    return c, n, i, o


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pinned", action="store_true", help="engine core on cores of its own")
    ap.add_argument("--intake", action="store_true", help="measure the API server's intake queue instead")
    ap.add_argument("--concurrency", type=_positive, help="--intake: the same load with N streams (3 N requests)")
    ap.add_argument("--load", type=_load, metavar="C,N,IN,OUT",
                    help="--intake: a closed loop of C streams, N requests, IN/OUT tokens")
    ap.add_argument("--budget", type=_positive, metavar="B", help="--intake: the server's --max-num-batched-tokens")
    return ap.parse_args(argv)


async def main_intake(args: argparse.Namespace) -> int:
    model = ensure_tiny_models(build=False).llama
    work = Path(tempfile.mkdtemp(prefix="vllm-tune-request-path-"))
    trace_path = work / "trace-intake.jsonl"
    split = split_cores()
    flags = ["--max-num-batched-tokens", str(args.budget)] if args.budget else []
    server = start_vllm(model, flags, env={"PYTHONPATH": str(TRACE_DIR), "VLLM_TUNE_REQUEST_TRACE": str(trace_path)},
                        split=split)
    concurrency, n, input_len, output_len = INTAKE_LOAD
    if args.concurrency:  # the same load at another concurrency, three waves of it
        concurrency = args.concurrency
        n = 3 * concurrency
    if args.load:
        concurrency, n, input_len, output_len = args.load
    load = (concurrency, n, input_len, output_len)
    print(f"closed loop of {concurrency}, {n} requests of {input_len} in / {output_len} out, engine core "
          f"{'on cores of its own' if split else 'sharing the cores (one CPU)'}; ms\n")
    print("| run | TTFT p50 | first wave: first / last add_request after its sends | later: add_request gap p25 / "
          "p50 / p75 (n) | " + " | ".join(LEGS) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(LEGS))
    try:
        with on_frontend_cores(split):
            await send_tagged(server.url, server.model, "warm", 1, load)  # first requests after start-up are slower
            by_wave: list[list[str]] = []
            by_burst: list[list[str]] = []
            for rep in range(2):
                records = await send_tagged(server.url, server.model, f"i{rep}", 500 + rep, load)
                trace = read_trace(trace_path)
                wave, gaps = intake_gaps(records, trace, concurrency)
                got, _missing = legs(records, trace)
                q = statistics.quantiles(gaps, n=4) if len(gaps) > 1 else [math.nan] * 3
                cells = " | ".join(f"{statistics.fmean(got[leg]):.1f}" for leg in LEGS)
                print(f"| {rep + 1} | {statistics.median(got['ttft']):.1f} | {wave[0]:.1f} / {wave[-1]:.1f} | "
                      f"{q[0]:.2f} / {q[1]:.2f} / {q[2]:.2f} ({len(gaps)}) | {cells} |", flush=True)
                by_wave.append(waves(records, trace, concurrency))
                by_burst.append(burst_positions(records, trace, concurrency))
            for rep, rows in enumerate(by_burst):
                print(f"\nrun {rep + 1}: requests after the first wave by their place among those sent within "
                      f"{BURST_MS:g} ms of each other (a closed loop's requests that finished in one step)\n\n"
                      "| place | requests | send to add_request p50 / mean | queued to first token p50 | TTFT p50 |\n"
                      "|---:|---:|---:|---:|---:|")
                print("\n".join(rows))
            for rep, rows in enumerate(by_wave):
                print(f"\nrun {rep + 1} by wave (ms from its first send)\n\n| wave | sent | finished | send to "
                      "add_request p50 | queued to first token p50 / max | TTFT p50 / p90 |\n"
                      "|---|---:|---:|---:|---:|---:|")
                print("\n".join(rows))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    ARGS = parse_args(sys.argv[1:])
    raise SystemExit(asyncio.run(main_intake(ARGS) if ARGS.intake else main(ARGS)))
