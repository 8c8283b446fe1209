"""The tuning loop, checkpoint/resume, budget, workers and the written file, with CPU timing backends."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.naming import ConfigKey
from vllm_tune.tools.moe.search_space import TuneShape, candidates, config_id, full_space
from vllm_tune.tools.moe.timers import CostModelTimer, CpuBlockedMatmulTimer, make_timer
from vllm_tune.tools.moe.tuner import tune
from vllm_tune.tools.moe.verify import closest_batch_size, lookup_like_vllm, validate_config_body
from vllm_tune.tools.moe.workers import run_parallel, split_batch_sizes
from vllm_tune.tools.moe.writer import write_config

SHAPE = TuneShape(E=8, N=256, hidden_size=128, top_k=2)
SIZES = [1, 16, 64]


def test_search_space_is_vllm_sized_and_pruned() -> None:
    assert len(full_space()) == 1920
    small, large = candidates(SHAPE, 1), candidates(SHAPE, 4096)
    assert 0 < len(small) < len(large) <= 1920
    assert max(c["BLOCK_SIZE_M"] for c in small) <= 32
    block = TuneShape(E=32, N=2048, hidden_size=7168, top_k=8, dtype="fp8_w8a8", block_shape=(128, 128))
    assert all(128 % c["BLOCK_SIZE_N"] == 0 and 128 % c["BLOCK_SIZE_K"] == 0 for c in candidates(block, 64))


def test_full_run_measures_every_point_once_and_picks_the_minimum(tmp_path: Path) -> None:
    timer = CostModelTimer()
    seen: list[tuple[int, int]] = []
    result = tune(SHAPE, SIZES, timer, checkpoint=tmp_path / "ck.json", progress=lambda d, t, m: seen.append((d, t)))
    total = sum(len(candidates(SHAPE, bs)) for bs in SIZES)
    assert result.complete and result.total == total == result.measured == timer.calls
    assert seen[-1] == (total, total)
    for bs in SIZES:
        times = {config_id(c): CostModelTimer().time_config(SHAPE, bs, c) for c in candidates(SHAPE, bs)}
        fastest = min(times.values())
        assert result.best_time_s[bs] == fastest
        assert times[config_id(result.best[bs])] == fastest
    assert not list(tmp_path.glob("*.tmp"))


def test_interrupted_run_resumes_to_the_identical_result(tmp_path: Path) -> None:
    reference = tune(SHAPE, SIZES, CostModelTimer(), checkpoint=tmp_path / "ref.json")
    cancel = threading.Event()
    first_timer = CostModelTimer()

    def stop_after_some(done: int, total: int, message: str) -> None:
        if done >= total // 3:
            cancel.set()

    ck = tmp_path / "ck.json"
    part = tune(SHAPE, SIZES, first_timer, checkpoint=ck, progress=stop_after_some, cancel=cancel)
    assert part.stopped == "cancelled" and not part.complete and 0 < part.measured < part.total
    on_disk = json.loads(ck.read_text())["measured"]
    assert sum(len(v) for v in on_disk.values()) == part.measured

    second_timer = CostModelTimer()
    done = tune(SHAPE, SIZES, second_timer, checkpoint=ck)
    assert done.complete and done.stopped is None
    assert first_timer.calls + second_timer.calls == reference.total  # nothing measured twice
    assert done.best == reference.best and done.best_time_s == reference.best_time_s


def test_budget_stops_between_points(tmp_path: Path) -> None:
    ticks = iter(range(10_000))
    result = tune(SHAPE, SIZES, CostModelTimer(), checkpoint=tmp_path / "ck.json", budget_s=5,
                  clock=lambda: float(next(ticks)))
    assert result.stopped == "budget" and not result.complete
    assert 0 < result.measured < result.total and result.best


def test_failing_configs_are_skipped_not_fatal(tmp_path: Path) -> None:
    timer = CostModelTimer(fail_if=lambda c: c["num_stages"] == 4)
    result = tune(SHAPE, [16], timer, checkpoint=tmp_path / "ck.json")
    assert result.complete and result.failed > 0
    assert result.best[16]["num_stages"] != 4


def test_checkpoint_of_another_search_is_refused(tmp_path: Path) -> None:
    ck = tmp_path / "ck.json"
    tune(SHAPE, [1], CostModelTimer(), checkpoint=ck)
    with pytest.raises(BadInputError, match="different shape"):
        tune(TuneShape(E=8, N=512, hidden_size=128, top_k=2), [1], CostModelTimer(), checkpoint=ck)
    ck.write_text("{not json")
    with pytest.raises(BadInputError, match="unreadable"):
        tune(SHAPE, [1], CostModelTimer(), checkpoint=ck)
    with pytest.raises(BadInputError):
        tune(SHAPE, [], CostModelTimer(), checkpoint=tmp_path / "x.json")


def test_cpu_matmul_timer_really_times() -> None:
    timer = CpuBlockedMatmulTimer()
    cfg = candidates(SHAPE, 16)[0]
    assert timer.time_config(SHAPE, 16, cfg) > 0
    with pytest.raises(BadInputError):
        make_timer("gpu-magic")


def test_written_file_is_what_the_lookup_loads(tmp_path: Path) -> None:
    result = tune(SHAPE, SIZES, CostModelTimer(), checkpoint=tmp_path / "ck.json")
    key = ConfigKey(8, 256, "NVIDIA_H200")
    path = write_config(tmp_path / "tuned", key, result.best)
    assert path.name == "E=8,N=256,device_name=NVIDIA_H200.json"
    body = json.loads(path.read_text())
    assert validate_config_body(body) == [] and list(body) == ["1", "16", "64"]
    look = lookup_like_vllm(key, tuned_folder=str(tmp_path / "tuned"), package_dir=None)
    assert look.found_at == str(path) and look.configs is not None
    assert look.configs[closest_batch_size(look.configs, 50)] == result.best[64]
    # a second run for more batch sizes extends the same file
    more = tune(SHAPE, [256], CostModelTimer(), checkpoint=tmp_path / "ck2.json")
    write_config(tmp_path / "tuned", key, more.best)
    assert sorted(int(k) for k in json.loads(path.read_text())) == [1, 16, 64, 256]


def test_validate_rejects_what_vllm_would_choke_on() -> None:
    assert validate_config_body({"x": {}})
    assert validate_config_body({"8": {"BLOCK_SIZE_M": 16}})
    assert validate_config_body([]) == ["top level is not a JSON object"]


def test_split_batch_sizes_round_robin() -> None:
    shares = split_batch_sizes([1, 2, 4, 8, 16], 2)
    assert sorted(b for share in shares for b in share) == [1, 2, 4, 8, 16] and len(shares) == 2
    assert split_batch_sizes([1], 4) == [[1]]


def test_parallel_workers_match_the_in_process_result(tmp_path: Path) -> None:
    reference = tune(SHAPE, SIZES, CostModelTimer(), checkpoint=tmp_path / "ref.json")
    events: list[str] = []
    result = run_parallel(SHAPE, SIZES, work_dir=tmp_path / "work", gpus=["0", "1"], backend="cost-model",
                          progress=lambda d, t, m: events.append(m), python=sys.executable)
    assert result.worker_errors == []
    assert result.complete and result.best == reference.best
    assert len(result.checkpoints) == 2 and any("GPU 1" in m for m in events)
    # re-running finds everything measured: resumable per worker
    again = run_parallel(SHAPE, SIZES, work_dir=tmp_path / "work", gpus=["0", "1"], backend="cost-model")
    assert again.best == reference.best and again.complete
    with pytest.raises(BadInputError):
        run_parallel(SHAPE, SIZES, work_dir=tmp_path / "w2", gpus=[], backend="cost-model")


def test_config_ids_are_stable() -> None:
    cfg = candidates(SHAPE, 1)[0]
    assert config_id(cfg) == config_id(dict(reversed(list(cfg.items()))))
