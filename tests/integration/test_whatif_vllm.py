"""what_if against real vLLM CPU servers: calibrate on A, predict six (config, load) pairs B, run them, compare.

The cases (tools/whatif/accuracy.py CASES) differ from the calibration (a short probe, taken once more when the
host's speed moved under it, plus run A) in
concurrency, request rate, prompt length, max_num_seqs (a case that queues), max_num_batched_tokens and KV
blocks (a case that preempts); every run draws its own prompts, so none is served from the prefix cache.
Tolerances are the targets of issue 16: throughput and p50 TTFT/ITL/TPOT within 20 %, p90 within 35 %,
every clear change in the right direction. A's reference load and each B are measured twice, alternating (A, B,
A, B: a drift of the host's speed then widens both pairs instead of reading as the change), and
a prediction is held to the mean of B's pair; a metric whose two measurements of B differ by more than its
tolerance cannot be held to it on this host and is reported, not judged, and a change is judged for direction
only beyond what both pairs differ by. When fewer than half of the metrics repeat, the host is too noisy to
test the predictions at all: the test is skipped with the whole table in the reason, so the lead sees it (it
never passes on such a host). A case that does not reach its state fails the test; model misses on metrics
that did repeat are an expected failure (KNOWN_MISSES, with the table) until none is left.

Every server runs its engine core process on cores of its own, the API server and this test's client on the
others (support/cpu_split.py): the simulator models the engine's steps alone, as on a GPU server, and on a host
where the front end takes the forward pass's core at each intake the chunked case's TPOT and throughput missed
for that reason alone (README, what_if section).

With VLLM_TUNE_KEEP_WHATIF_RUNS=DIR the runs are saved under DIR instead of a temporary folder, to be replayed with
`bench/replay_whatif_accuracy.py DIR --seed 200` (this test's seeds) like the bench's, and packed for
tests/data/whatif/ with `scripts/pack_whatif_runs.py DIR tests/data/whatif/proof-<date>T<hhmm>.jsonl.gz`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from support.cpu_split import on_frontend_cores, split_cores
from support.vllm_server import VllmFactory

from vllm_tune.tools.whatif.accuracy import (
    CASES,
    PROOF_SEED,
    CaseOutcome,
    calibration_line,
    failures,
    run_case,
    table,
)

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


# Not met yet on every metric (README, what_if section; whatif.simplifications and whatif.calibration-log in the
# knowledge base). With the engine on a core of its own, the saved pinned bench runs on the suite's 2-core VM replay
# with 1 to 11 misses (1-5 on quiet moments): the max_num_batched_tokens=256 case's p50 TTFT predicted high on most of
# them (the hand-off outside the engine is shorter when chunking staggers the closed loop, which the simulator does
# not model), and misses that follow the host's speed between the probe and the runs. Every case must still reach the
# state it exists for (a failure otherwise); accuracy misses are reported as an expected failure with the table until
# they are gone, then this becomes a plain assertion.
KNOWN_MISSES = ("issue 16 targets not met on every metric (the max_num_batched_tokens case's p50 TTFT predicted high, "
                "and misses that follow the host's speed; see README what_if section)")


async def test_predictions_hold_against_six_real_runs(vllm_server_factory: VllmFactory, tmp_path: Path) -> None:
    split = split_cores()

    async def start(flags: dict[str, str]) -> str:
        args = [x for kv in flags.items() for x in kv]
        server = await asyncio.to_thread(vllm_server_factory, args=args, split=split)
        return server.url

    keep = os.environ.get("VLLM_TUNE_KEEP_WHATIF_RUNS")
    save = Path(keep) if keep else tmp_path
    save.mkdir(parents=True, exist_ok=True)
    outcomes: list[CaseOutcome] = []
    calibrations: list[str] = []  # each case's fitted costs, residuals and probe drift: what a miss is read against
    with on_frontend_cores(split):
        for i, case in enumerate(CASES):
            a_url = await start({})  # touching A keeps it the most recently used server of the factory
            cal, outcome = await run_case(a_url, {}, start, case, seed=PROOF_SEED + i, save_result=str(save))
            outcomes.append(outcome)
            calibrations.append(f"{case.name}: {calibration_line(cal)}")
    report = "\n".join(calibrations) + "\n\n" + table(outcomes)
    print(report)
    rows = [r for oc in outcomes for r in oc.rows]
    judged = [r for r in rows if r.judgeable]
    if len(judged) * 2 < len(rows):
        # So busy a host cannot deliver the load either (a starved client keeps fewer requests in flight than
        # asked, so even the queueing case may not queue): nothing here can be judged, the table says why.
        pytest.skip(f"only {len(judged)} of {len(rows)} metrics repeated within their tolerance between two "
                    f"runs of the same load (one other run between them): this host is too noisy to hold "
                    f"predictions to the targets\n{report}")
    states = [line for line in failures(outcomes) if "expected" in line]
    assert not states, f"a case did not reach the state it exists for: {states}\n{report}"
    misses = failures(outcomes, judgeable_only=True)
    if misses:
        pytest.xfail(KNOWN_MISSES + "\n" + "\n".join(misses) + "\n" + report)
