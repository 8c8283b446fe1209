"""The packed record log: same content as the records it was built from, in every reshaping the runner does."""

from __future__ import annotations

import pickle
from array import array

from vllm_tune.tools.bench.metrics import compute_metrics
from vllm_tune.tools.bench.records import RecordLog, RequestRecord


def sample(i: int) -> RequestRecord:
    ok = i % 3 != 2
    return RequestRecord(index=i, intended_send=i * 0.5, start_time=i * 0.5 + 0.001 * i, success=ok,
                         error="" if ok else f"HTTP 500 for {i}", prompt_len=10 + i, output_len=i + 1 if ok else 0,
                         ttft=0.01 * (i + 1), latency=0.01 * (i + 1) + 0.002 * i,
                         itl=array("d", [0.002] * i if ok else []), usage_reported=i != 4, chunks=i + 1,
                         text="hello" if i == 4 else "")


def test_log_round_trips_every_field() -> None:
    records = [sample(i) for i in range(7)]
    log = RecordLog.of(records)
    assert len(log) == 7
    assert list(log) == records
    assert log.ok_rows() == [0, 1, 3, 4, 6]
    assert log.errors == {2: "HTTP 500 for 2", 5: "HTTP 500 for 5"}
    assert log.texts == {4: "hello"}
    assert list(log.gaps(3)) == [0.002] * 3 and list(log.gaps(0)) == []


def test_select_extend_sort_and_payload_keep_rows_whole() -> None:
    a = RecordLog.of(sample(i) for i in (4, 0, 2))
    b = RecordLog.of(sample(i) for i in (5, 1, 3))
    a.extend(RecordLog.from_payload(pickle.loads(pickle.dumps(b.payload()))))
    merged = a.sorted_by_index()
    assert [r.index for r in merged] == [0, 1, 2, 3, 4, 5]
    assert list(merged) == [sample(i) for i in range(6)]
    picked = merged.select([5, 3])
    assert list(picked) == [sample(5), sample(3)]
    assert picked.errors == {0: "HTTP 500 for 5"}


def test_metrics_read_the_same_from_objects_and_from_the_log() -> None:
    records = [sample(i) for i in range(30)]
    slo = {"ttft": 150.0, "tpot": 5.0}
    from_list = compute_metrics(records, 20.0, percentiles=[50.0, 99.0], slo_ms=slo)
    from_log = compute_metrics(RecordLog.of(records), 20.0, percentiles=[50.0, 99.0], slo_ms=slo)
    assert from_list == from_log
    assert from_log["completed"] == 20 and from_log["failed"] == 10


def test_packed_rows_cost_bytes_not_objects() -> None:
    """75 bytes a row plus 8 a gap: the growth a long run sees per finished request."""
    log = RecordLog()
    for i in range(10_000):
        log.add(RequestRecord(index=i, intended_send=float(i), start_time=float(i), success=True, output_len=4,
                              itl=array("d", [0.001, 0.001, 0.001]), usage_reported=True, chunks=4))
    payload_bytes = sum(col.itemsize * len(col) for col in log.payload() if isinstance(col, array))
    assert payload_bytes == 10_000 * (8 * 9 + 1 + 3 * 8)
