"""When each request should be sent: offsets in seconds from the start of the measured run.

Open-loop schedules are computed up front from a seeded generator, so the same seed gives the same
schedule and a worker process can be handed its share of it. Gamma inter-arrivals with shape
`burstiness` and mean 1/rate generalise Poisson (burstiness 1); below 1 is burstier, above 1 smoother
(the same parameterisation as `vllm bench serve --burstiness`).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.files import read_text

MAX_TRACE_BYTES = 256 * 1024 * 1024

ArrivalKind = Literal["poisson", "constant", "gamma"]


@dataclass(frozen=True)
class TraceEntry:
    offset_s: float
    input_len: int | None = None
    output_len: int | None = None


def rate_schedule(n: int, rate: float, *, kind: ArrivalKind = "poisson", burstiness: float = 1.0,
                  seed: int = 0) -> list[float]:
    """Offsets of `n` sends at `rate` req/s."""
    if not rate > 0 or math.isinf(rate):
        raise BadInputError("request rate must be a positive finite number (use concurrency for 'as fast as possible')")
    if not burstiness > 0:
        raise BadInputError("burstiness must be positive (1 = Poisson)")
    rng = random.Random(seed)
    out: list[float] = []
    t = 0.0
    for i in range(n):
        out.append(t)
        if kind == "constant":
            t = (i + 1) / rate
        else:
            shape = 1.0 if kind == "poisson" else burstiness
            t += rng.gammavariate(shape, 1.0 / (rate * shape))
    return out


def ramp_schedule(n: int, start_rate: float, end_rate: float, duration_s: float, *, seed: int = 0) -> list[float]:
    """Poisson arrivals whose rate moves linearly from start_rate to end_rate over duration_s.

    Drawn by thinning a Poisson process at the peak rate, which gives an exact inhomogeneous process.
    """
    if start_rate < 0 or end_rate < 0 or max(start_rate, end_rate) <= 0 or duration_s <= 0:
        raise BadInputError("ramp needs non-negative rates (one positive) and a positive duration")
    rng = random.Random(seed)
    peak = max(start_rate, end_rate)
    out: list[float] = []
    t = 0.0
    while len(out) < n:
        t += rng.expovariate(peak)
        if t > duration_s:
            break
        current = start_rate + (end_rate - start_rate) * t / duration_s
        if rng.random() * peak <= current:
            out.append(t)
    return out


def read_trace(path: str | Path, *, time_scale: float = 1.0) -> list[TraceEntry]:
    """JSONL trace: one object per line with `timestamp` (ms, Mooncake style) or `offset_s`, optional
    `input_length`/`input_len` and `output_length`/`output_len`. Offsets are rebased to the first entry."""
    p = Path(path)
    lines = read_text(p, limit=MAX_TRACE_BYTES, what="trace").splitlines()
    entries: list[TraceEntry] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            offset = float(obj["offset_s"]) if "offset_s" in obj else float(obj["timestamp"]) / 1000.0
            inp = obj.get("input_length", obj.get("input_len"))
            outp = obj.get("output_length", obj.get("output_len"))
            entries.append(TraceEntry(offset, int(inp) if inp is not None else None,
                                      int(outp) if outp is not None else None))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise BadInputError(f"{p}:{no}: expected a JSON object with 'timestamp' (ms) or 'offset_s'") from None
    if not entries:
        raise BadInputError(f"trace {p} has no entries")
    entries.sort(key=lambda e: e.offset_s)
    base = entries[0].offset_s
    return [TraceEntry((e.offset_s - base) * time_scale, e.input_len, e.output_len) for e in entries]
