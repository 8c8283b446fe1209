"""Saved results, in run_benchmark's layout, of what_if's default probe loads served by a known step model: a
calibration fitted on them can be held against the model that made them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vllm_tune.tools.bench.api import RunBenchmarkInput
from vllm_tune.tools.whatif.calibrate import DEFAULT_PROBE, ProbePoint
from vllm_tune.tools.whatif.results import load_from_request, summarize
from vllm_tune.tools.whatif.simulate import EngineConfig, Load, StepModel, run


def simulated_probe(engine: EngineConfig, true: StepModel) -> Iterator[tuple[int, ProbePoint, Load, dict[str, Any]]]:
    """Each default probe load (seed = its index) and the summary `true` gives it."""
    for i, p in enumerate(DEFAULT_PROBE):
        req = RunBenchmarkInput(url="http://127.0.0.1:1", concurrency=p.concurrency, num_prompts=p.num_prompts,
                                input_len=p.input_len, output_len=p.output_len, range_ratio=p.range_ratio, seed=i)
        load = load_from_request(req)
        yield i, p, load, summarize(run(engine, true, load), load, engine, true, percentiles=[50.0, 90.0])


def as_saved(res: dict[str, Any], load: Load, engine: EngineConfig, *, seed: int, concurrency: int | None,
             input_len: int, output_len: int, server_url: str = "http://127.0.0.1:8000") -> dict[str, Any]:
    """A simulated summary with what run_benchmark saves beside it (lengths, the server block, provenance)."""
    res.update(input_lens=[x for x, _ in load.lens], output_lens=[y for _, y in load.lens],
               server={"cache_config": {"num_gpu_blocks": str(engine.num_gpu_blocks),
                                        "block_size": str(engine.block_size)}},
               provenance={"server_url": server_url, "seed": seed, "max_model_len": 2048,
                           "load": {"concurrency": concurrency},
                           "workload": {"kind": "random", "input_len": input_len, "output_len": output_len}})
    return res


def write_probe_results(folder: Path, engine: EngineConfig, true: StepModel) -> list[str]:
    paths = []
    for i, p, load, res in simulated_probe(engine, true):
        as_saved(res, load, engine, seed=i, concurrency=p.concurrency, input_len=p.input_len, output_len=p.output_len)
        d = folder / f"run{i}"
        d.mkdir()
        (d / "result.json").write_text(json.dumps(res))
        paths.append(str(d))
    return paths
