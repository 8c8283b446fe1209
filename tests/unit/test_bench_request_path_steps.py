"""bench/bench_request_path.py's step table, on a trace in the format its sitecustomize writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_request_path import QUEUED, SCHEDULED, contention_rows, read_trace, step_times


def _batch(engine: float, tokens: dict[str, int], events: dict[str, list[tuple[int, float]]]) -> dict[str, object]:
    # vLLM's engine-side id carries one more suffix than the id the client gave
    return {"kind": "outputs", "taken": engine + 0.0005, "engine": engine,
            "requests": [(f"cmpl-{rid}-0-ab12", n, events.get(rid, [])) for rid, n in tokens.items()]}


def test_steps_split_by_mix_and_by_requests_in_intake(tmp_path: Path) -> None:
    # t-0 decodes from the start; t-1 is sent at 1.0085 and queued at 1.0115 (half of the 6 ms step to 1.014),
    # scheduled in the next step, and has its first token at 1.022.
    trace = tmp_path / "trace.jsonl"
    rows = [
        _batch(1.000, {"t-0": 1}, {"t-0": [(QUEUED, 0.995), (SCHEDULED, 0.996)]}),
        _batch(1.004, {"t-0": 1}, {}),
        _batch(1.008, {"t-0": 1}, {}),
        _batch(1.014, {"t-0": 1}, {}),
        # the engine core's events for a request come with its first output
        _batch(1.022, {"t-0": 1, "t-1": 1}, {"t-1": [(QUEUED, 1.0115), (SCHEDULED, 1.0142)]}),
        _batch(1.026, {"t-0": 1, "t-1": 1}, {}),
        _batch(1.500, {"t-0": 1, "t-1": 1}, {}),  # after an idle gap: not a step
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = [{"id": "t-0", "send": 0.990}, {"id": "t-1", "send": 1.0085}]
    steps = step_times(read_trace(trace), records)
    assert [(d, p) for _, d, p, _ in steps] == [(1, 0), (1, 0), (1, 0), (1, 1), (2, 0)]
    assert [round(ms, 3) for ms, *_ in steps] == [4.0, 4.0, 6.0, 8.0, 4.0]
    assert [h for *_, h in steps] == pytest.approx([0.0, 0.0, 0.5, 0.0, 0.0])
    (summary, row) = contention_rows(steps, min_steps=1)
    assert row == "1 decoding, 0 prefilling: 4.00 ms (2 steps) without, 6.00 ms (1) with a request in intake (+2.00 ms)"
    assert summary.startswith("over 1 mixes seen both ways: +2.00 ms median")
