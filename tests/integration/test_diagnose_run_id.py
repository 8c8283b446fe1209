"""A run_benchmark run diagnosed again later by its run id, against the suite's real vLLM CPU server.

What load cannot change is asserted: every request the run completed finished inside the window the run saved
(the server's own success counter says so), the window has requests in it, and its length is the one the run
recorded in capture.json. A run stopped halfway keeps the window it had.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from vllm_tune.tools.bench.api import CONTROL_MAX_BYTES, RunBenchmarkInput, run_benchmark
from vllm_tune.tools.diagnose.api import DiagnoseInput, diagnose_metrics

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_a_benchmark_run_is_diagnosed_by_its_run_id(vllm_server: Any, tmp_path: Path) -> None:
    out = await run_benchmark(RunBenchmarkInput(
        url=vllm_server.url, model=vllm_server.model, concurrency=4, num_prompts=12, input_len=32, output_len=16,
        warmup_requests=2, save_result=str(tmp_path)))
    assert out.state == "completed" and out.result is not None and out.result.completed == 12
    folder = tmp_path / out.run_id
    meta = json.loads((folder / "capture.json").read_text())
    assert meta["files"] == {"before": "before.prom", "after": "after.prom"} and meta["window_s"] > 0
    assert all(0 < (folder / f).stat().st_size <= CONTROL_MAX_BYTES for f in ("before.prom", "after.prom"))

    diag = await diagnose_metrics(DiagnoseInput(run_id=out.run_id, results_dir=str(tmp_path)))
    # The two warm-up requests finished before the first scrape; the 12 measured ones between the two.
    assert diag.workload.finished_requests == out.result.completed
    assert not diag.verdict.startswith("idle")
    assert diag.window_s == pytest.approx(meta["window_s"], abs=0.01)
    server = out.result.model_dump()["server"]
    assert server["requests_finished"] == diag.workload.finished_requests  # the run's own view agrees


async def test_a_stopped_run_keeps_the_window_it_had(vllm_server: Any, tmp_path: Path) -> None:
    # Stopped 2 s after its first request finished, of a load that takes about a minute on a fast idle box
    # (600 x 64 tokens on 2 streams). The clock starts at the first finish, not at the call: building 600
    # exact-length prompts through /tokenize alone can take longer than a fixed delay on a slow machine.
    first_done: list[float] = []

    async def report(done: float, total: float | None, message: str) -> None:
        if done >= 1 and not first_done:
            first_done.append(time.monotonic())

    out = await run_benchmark(RunBenchmarkInput(
        url=vllm_server.url, model=vllm_server.model, concurrency=2, num_prompts=600, input_len=32, output_len=64,
        warmup_requests=0, save_result=str(tmp_path)), report=report,
        stop=lambda: bool(first_done) and time.monotonic() - first_done[0] > 2.0)
    assert out.state == "cancelled" and out.result is not None and 0 < out.result.completed < 600
    diag = await diagnose_metrics(DiagnoseInput(run_id=out.run_id, results_dir=str(tmp_path)))
    finished = diag.workload.finished_requests or 0
    # Requests cut off by the stop may still finish on the server after the client gave up on them.
    assert out.result.completed <= finished <= out.result.completed + 2
    assert not diag.verdict.startswith("idle")


async def test_a_run_without_scrapes_says_so(vllm_server: Any, tmp_path: Path) -> None:
    from vllm_tune.tools.errors import BadInputError

    out = await run_benchmark(RunBenchmarkInput(
        url=vllm_server.url, model=vllm_server.model, concurrency=1, num_prompts=2, input_len=16, output_len=4,
        warmup_requests=0, scrape_metrics=False, save_result=str(tmp_path)))
    assert not (tmp_path / out.run_id / "capture.json").exists()
    with pytest.raises(BadInputError, match="has no saved /metrics scrapes"):
        await diagnose_metrics(DiagnoseInput(run_id=out.run_id, results_dir=str(tmp_path)))
