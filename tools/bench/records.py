"""What each request did: a mutable record while it is in flight, packed columns once it is finished.

A run keeps every finished request (percentiles must be exact and `vllm bench serve` keeps them too), so
the finished form decides how memory grows with run length. As Python objects a request costs ~0.45 KiB
plus ~32 bytes per streamed token; packed into typed arrays it costs ~75 bytes plus 8 per token, so
a 100k-request run grows by about 10 MiB (bench/bench_loadgen.py measures it).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

_SUCCESS, _USAGE = 1, 2
_ROW_COLUMNS = ("index", "intended", "start", "ttft", "latency", "prompt_len", "output_len", "chunks", "flags")


@dataclass(slots=True)
class RequestRecord:
    """One request, in perf_counter seconds (one clock shared by every process on the host)."""

    index: int
    intended_send: float  # when the schedule wanted it sent (absolute perf_counter seconds)
    start_time: float = 0.0  # when it was actually sent
    success: bool = False
    error: str = ""
    prompt_len: int = 0
    output_len: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: array[float] = field(default_factory=lambda: array("d"))
    usage_reported: bool = False
    chunks: int = 0
    text: str = ""  # kept only when the server sent no usage, to count tokens with /tokenize afterwards

    @property
    def schedule_lag(self) -> float:
        return self.start_time - self.intended_send


class RecordLog:
    """Finished requests as columns (row k is the k-th request added).

    Strings are kept only where they exist: errors for failed requests, response text for successful
    ones whose stream carried no usage block. Iterating yields RequestRecord copies, for callers that
    want objects; the metrics read the columns."""

    __slots__ = ("chunks", "errors", "flags", "index", "intended", "itl", "itl_end", "latency", "output_len",
                 "prompt_len", "start", "texts", "ttft")

    def __init__(self) -> None:
        self.index = array("q")
        self.intended = array("d")
        self.start = array("d")
        self.ttft = array("d")
        self.latency = array("d")
        self.prompt_len = array("q")
        self.output_len = array("q")
        self.chunks = array("q")
        self.flags = array("B")
        self.itl = array("d")  # every row's gaps, pooled in row order
        self.itl_end = array("q")  # row k's gaps are itl[itl_end[k-1]:itl_end[k]]
        self.errors: dict[int, str] = {}
        self.texts: dict[int, str] = {}

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> RecordLog:
        log = cls()
        for rec in records:
            log.add(rec)
        return log

    def add(self, rec: RequestRecord) -> None:
        k = len(self.index)
        self.index.append(rec.index)
        self.intended.append(rec.intended_send)
        self.start.append(rec.start_time)
        self.ttft.append(rec.ttft)
        self.latency.append(rec.latency)
        self.prompt_len.append(rec.prompt_len)
        self.output_len.append(rec.output_len)
        self.chunks.append(rec.chunks)
        self.flags.append((_SUCCESS if rec.success else 0) | (_USAGE if rec.usage_reported else 0))
        self.itl.extend(rec.itl)
        self.itl_end.append(len(self.itl))
        if rec.error:
            self.errors[k] = rec.error
        if rec.text:
            self.texts[k] = rec.text

    def __len__(self) -> int:
        return len(self.index)

    def success(self, k: int) -> bool:
        return bool(self.flags[k] & _SUCCESS)

    def usage_reported(self, k: int) -> bool:
        return bool(self.flags[k] & _USAGE)

    def error(self, k: int) -> str:
        return self.errors.get(k, "")

    def gaps(self, k: int) -> array[float]:
        return self.itl[self.itl_end[k - 1] if k else 0:self.itl_end[k]]

    def ok_rows(self) -> list[int]:
        return list(compress(range(len(self.flags)), (f & _SUCCESS for f in self.flags)))

    def record(self, k: int) -> RequestRecord:
        return RequestRecord(
            index=self.index[k], intended_send=self.intended[k], start_time=self.start[k], success=self.success(k),
            error=self.error(k), prompt_len=self.prompt_len[k], output_len=self.output_len[k], ttft=self.ttft[k],
            latency=self.latency[k], itl=self.gaps(k), usage_reported=self.usage_reported(k),
            chunks=self.chunks[k], text=self.texts.get(k, ""))

    def __iter__(self) -> Iterator[RequestRecord]:
        return (self.record(k) for k in range(len(self)))

    def select(self, rows: Iterable[int]) -> RecordLog:
        """A new log of the given rows, in the order given."""
        order = list(rows)
        out = RecordLog()
        for name in _ROW_COLUMNS:
            col = getattr(self, name)
            setattr(out, name, array(col.typecode, [col[k] for k in order]))
        end = 0
        for pos, k in enumerate(order):
            gaps = self.gaps(k)
            out.itl.extend(gaps)
            end += len(gaps)
            out.itl_end.append(end)
            if k in self.errors:
                out.errors[pos] = self.errors[k]
            if k in self.texts:
                out.texts[pos] = self.texts[k]
        return out

    def extend(self, other: RecordLog) -> None:
        base, itl_base = len(self), len(self.itl)
        for name in _ROW_COLUMNS:
            getattr(self, name).extend(getattr(other, name))
        self.itl.extend(other.itl)
        self.itl_end.extend(array("q", (e + itl_base for e in other.itl_end)))
        self.errors.update({base + k: v for k, v in other.errors.items()})
        self.texts.update({base + k: v for k, v in other.texts.items()})

    def sorted_by_index(self) -> RecordLog:
        index = self.index
        if all(index[k] < index[k + 1] for k in range(len(index) - 1)):
            return self
        return self.select(sorted(range(len(index)), key=index.__getitem__))

    def payload(self) -> tuple[Any, ...]:
        """A picklable form for sending a worker's records to the parent (arrays pickle as raw bytes)."""
        return tuple(getattr(self, name) for name in self.__slots__)

    @classmethod
    def from_payload(cls, payload: tuple[Any, ...]) -> RecordLog:
        log = cls()
        for name, value in zip(cls.__slots__, payload, strict=True):
            setattr(log, name, value)
        return log
