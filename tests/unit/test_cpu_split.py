"""The core split the what_if proof runs its vLLM servers with (tests/support/cpu_split.py), on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cpu_split import CoreSplit, group_pids, on_frontend_cores, pin_group, split_cores

# A parent that names one child as vLLM names its engine core process and keeps another plain one, all in one group.
GROUP = """
import subprocess, sys, time
code = ("import sys, time\\n"
        "if sys.argv[1] == 'engine':\\n    open('/proc/self/comm', 'w').write('VLLM::EngineCore')\\n"
        "print('up', flush=True)\\ntime.sleep(60)")
kids = [subprocess.Popen([sys.executable, '-c', code, name], stdout=sys.stdout) for name in ('engine', 'other')]
time.sleep(60)
"""


@pytest.fixture
def group() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", GROUP], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None
        for _ in range(2):
            assert proc.stdout.readline().strip() == b"up"
        yield proc
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a split needs two CPUs")
def test_engine_core_process_and_the_rest_land_on_their_own_cores(group: subprocess.Popen[bytes]) -> None:
    split = split_cores()
    assert split is not None
    assert split.engine and split.frontend and not split.engine & split.frontend
    assert split.engine | split.frontend == os.sched_getaffinity(0)
    placed = pin_group(group.pid, split)
    members = {pid: Path(f"/proc/{pid}/comm").read_text().strip() for pid in group_pids(group.pid)}
    assert len(members) == 3 and sorted(placed.values()) == ["engine", "frontend", "frontend"]
    for pid, comm in members.items():
        want = split.engine if comm.startswith("VLLM::EngineCor") else split.frontend
        for tid in os.listdir(f"/proc/{pid}/task"):
            assert os.sched_getaffinity(int(tid)) == want, (pid, comm)


def test_a_group_without_an_engine_core_is_refused() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        time.sleep(0.2)
        with pytest.raises(RuntimeError, match="no VLLM::EngineCor process"):
            pin_group(proc.pid, CoreSplit(frozenset({0}), frozenset({0})))
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a split needs two CPUs")
def test_the_client_runs_on_the_front_end_cores_and_gets_its_cpus_back() -> None:
    before = os.sched_getaffinity(0)
    split = split_cores()
    with on_frontend_cores(split):
        assert split is not None and os.sched_getaffinity(0) == split.frontend
    assert os.sched_getaffinity(0) == before
    with on_frontend_cores(None):  # a one-CPU host: nothing to split
        assert os.sched_getaffinity(0) == before
