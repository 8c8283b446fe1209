"""bench/bench_request_path.py's step and wave tables, on traces in the format its sitecustomize writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_request_path import (
    INTAKE_LOAD,
    QUEUED,
    SCHEDULED,
    burst_positions,
    contention_rows,
    parse_args,
    read_trace,
    step_times,
    waves,
)


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


def test_waves_of_a_closed_loop_are_read_in_send_order(tmp_path: Path) -> None:
    # Two waves of 48 (the intake load's concurrency): request i of wave w is sent at w * 500 + i ms, reaches
    # add_request 4 ms later, is queued 10 ms after its send, has its first token from the engine 20 + i ms after
    # that, which the client reads 5 ms later, and finishes 400 ms after its send.
    assert INTAKE_LOAD[0] == 48
    trace, records, rows = tmp_path / "trace.jsonl", [], []
    for w in range(2):
        for i in range(48):
            send = 10.0 + w * 0.5 + i * 1e-3
            queued, first = send + 0.010, send + 0.030 + i * 1e-3
            rid = f"i0-{w * 48 + i}"
            rows.append(_batch(first, {rid: 1}, {rid: [(QUEUED, queued), (SCHEDULED, queued + 0.001)]}))
            rows.append({"kind": "add", "id": f"cmpl-{rid}-0", "entered": send + 0.004, "left": send + 0.0043})
            records.append({"id": rid, "i": w * 48 + i, "send": send, "first": first + 0.005, "done": send + 0.400})
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))  # read_trace orders the batches
    got = waves(records, read_trace(trace))
    # queued to first token 20..67 ms (median 43.5), TTFT 35..82 ms (median 58.5, the 90th of 48 is the 43rd: 77)
    assert got == ["| 1 | 0-47 | 400-447 | 4.0 | 43.5 / 67.0 | 58.5 / 77.0 |",
                   "| 2 | 500-547 | 900-947 | 4.0 | 43.5 / 67.0 | 58.5 / 77.0 |"]


def test_requests_after_the_first_wave_are_grouped_by_their_place_in_a_burst(tmp_path: Path) -> None:
    # A closed loop of 2: requests 0-1 are the first wave (left out). Requests 2 and 3 are sent 0.5 ms apart (one
    # burst: places 0 and 1), request 4 alone 20 ms later (place 0). Request 3 waits 3 ms longer for add_request.
    trace, records, rows = tmp_path / "trace.jsonl", [], []
    sends = {0: 1.0, 1: 1.0, 2: 2.0, 3: 2.0005, 4: 2.0205}
    intake = {0: 0.004, 1: 0.004, 2: 0.004, 3: 0.007, 4: 0.006}
    for i, send in sends.items():
        rid = f"i0-{i}"
        queued, first = send + 0.010, send + 0.030
        rows.append(_batch(first, {rid: 1}, {rid: [(QUEUED, queued), (SCHEDULED, queued + 0.001)]}))
        rows.append({"kind": "add", "id": f"cmpl-{rid}-0", "entered": send + intake[i], "left": send + intake[i]})
        records.append({"id": rid, "i": i, "send": send, "first": first + 0.002, "done": send + 0.2})
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = burst_positions(records, read_trace(trace), concurrency=2)
    assert got == ["| 0 | 2 | 5.0 / 5.0 | 20.0 | 32.0 |", "| 1 | 1 | 7.0 / 7.0 | 20.0 | 32.0 |"]


def test_options_are_checked_before_any_server_starts() -> None:
    args = parse_args(["--intake", "--load", "8,96,700,48", "--budget", "256"])
    assert (args.intake, args.load, args.budget, args.pinned) == (True, (8, 96, 700, 48), 256, False)
    for bad in (["--load", "8,96"], ["--load", "8,96,700,x"], ["--budget", "0"], ["--concurrency", "-3"]):
        with pytest.raises(SystemExit) as exc:
            parse_args(bad)
        assert exc.value.code == 2
