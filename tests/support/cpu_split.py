"""Give a vLLM CPU server's engine its own cores, apart from its API server and the benchmark client.

On the suite's 2-core host nothing is bound by default: vLLM 0.32 reserves a core "for other processes" when
it binds its OpenMP threads (vllm/utils/ompmultiprocessing.py L271-298 at v0.32.0), but with the worker
inside the engine core process (VLLM_ENABLE_V1_MULTIPROCESSING=0) every thread of every process may run on
both cores (/proc/<pid>/task/*/status, Cpus_allowed_list). The forward pass then shares its core with the API server's
intake and streaming and with the client, and each engine step slows by whatever they do meanwhile
(bench/bench_request_path.py's step table: 1.9-3.0 ms while a request is in intake). A GPU server does not work
that way (the forward pass runs on the accelerator) and vLLM's CPU guide keeps cores free for the serving
front end, so the what_if proof pins the engine core process to one share of the cores and everything else
(API server, its helpers, the client) to the other.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ENGINE_PROCESS = "VLLM::EngineCor"  # the engine core's process title (comm keeps 15 characters)


@dataclass(frozen=True)
class CoreSplit:
    engine: frozenset[int]
    frontend: frozenset[int]


def split_cores() -> CoreSplit | None:
    """The first half of this process's CPUs for the engine, the rest for the front end; None with one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    half = len(cpus) // 2
    return CoreSplit(frozenset(cpus[:half]), frozenset(cpus[half:]))


def group_pids(pgid: int) -> list[int]:
    """The live processes of a process group, from /proc."""
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == pgid:
                out.append(int(entry.name))
        except ProcessLookupError:
            continue
    return out


def pin_group(pgid: int, split: CoreSplit) -> dict[int, str]:
    """Pin every thread of every process in the group: the engine core's to split.engine, the others' to
    split.frontend. Threads started later inherit their creator's CPUs. Returns pid -> where it went."""
    placed: dict[int, str] = {}
    for pid in group_pids(pgid):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue  # gone meanwhile
        engine = comm.startswith(ENGINE_PROCESS)
        for tid in tids:
            try:
                os.sched_setaffinity(tid, split.engine if engine else split.frontend)
            except OSError:
                continue
        placed[pid] = "engine" if engine else "frontend"
    if "engine" not in placed.values():
        raise RuntimeError(f"no {ENGINE_PROCESS} process in process group {pgid}: cannot give the engine its cores")
    return placed


@contextmanager
def on_frontend_cores(split: CoreSplit | None) -> Iterator[None]:
    """Run the calling thread (and the threads it starts) on the front end's cores, as a client would, then
    give it back the CPUs it had."""
    if split is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, split.frontend)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
