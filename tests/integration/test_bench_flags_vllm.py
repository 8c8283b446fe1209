"""`vllm-tune bench` shares flags with `vllm bench serve`: every flag we claim to share has the name, type,
default and arity of the real vLLM 0.32.0 parser (read from vLLM itself), and a pasted vllm bench serve
command line means the same load here."""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.vllm_env import ComponentMissingError, ensure_vllm_python

from vllm_tune.cli import bench as bench_cli
from vllm_tune.cli.main import build_parser

pytestmark = pytest.mark.integration

DUMP = Path(__file__).resolve().parents[2] / "scripts" / "dump_bench_serve_flags.py"


@pytest.fixture(scope="module")
def vllm_table() -> dict[str, Any]:
    try:
        python = ensure_vllm_python(install=False)
    except ComponentMissingError as exc:
        pytest.fail(str(exc), pytrace=False)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    proc = subprocess.run([str(python), str(DUMP)], capture_output=True, text=True, timeout=300, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return table


def _ours() -> dict[str, argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bench = sub.choices["bench"]
    return {opt: action for action in bench._actions for opt in action.option_strings}


def _plain(value: Any) -> Any:
    return "inf" if isinstance(value, float) and math.isinf(value) else value


def test_every_shared_flag_matches_vllms_parser(vllm_table: dict[str, Any]) -> None:
    ours = _ours()
    assert len(bench_cli.SHARED_WITH_VLLM_BENCH) >= 25
    for flag in bench_cli.SHARED_WITH_VLLM_BENCH:
        assert flag in vllm_table, f"{flag} is not a vllm bench serve flag"
        assert flag in ours, f"{flag} is missing from vllm-tune bench"
        real, mine = vllm_table[flag], ours[flag]
        assert (mine.nargs != 0) == real["takes_value"], flag
        assert mine.nargs == real["nargs"], flag
        my_type = getattr(mine.type, "__name__", None) if mine.type else None
        assert my_type == real["type"], f"{flag}: type {my_type} vs vLLM's {real['type']}"
        assert _plain(mine.default) == real["default"], f"{flag}: default {mine.default!r} vs {real['default']!r}"
        if mine.choices is not None:
            assert real["choices"] is not None and set(map(str, mine.choices)) <= set(real["choices"]), flag


def test_a_pasted_vllm_bench_serve_line_means_the_same_load() -> None:
    line = shlex.split("bench --backend vllm --base-url http://127.0.0.1:8000 --model tiny --dataset-name random "
                       "--random-input-len 100 --random-output-len 20 --random-range-ratio 0.5 --request-rate 4 "
                       "--burstiness 0.5 --max-concurrency 8 --num-prompts 50 --goodput ttft:500 tpot:50 "
                       "--metric-percentiles 50,90,99 --seed 7 --num-warmups 3")
    req = bench_cli._input(build_parser().parse_args(line))
    assert (req.url, req.model, req.endpoint) == ("http://127.0.0.1:8000", "tiny", "completions")
    assert (req.rate, req.max_concurrency, req.concurrency, req.num_prompts) == (4.0, 8, None, 50)
    assert (req.arrival, req.burstiness) == ("gamma", 0.5)
    assert (req.input_len, req.output_len, req.range_ratio) == (100, 20, 0.5)
    assert req.ignore_eos  # vLLM forces it for the random dataset
    assert req.slo == {"ttft": 500.0, "tpot": 50.0}
    assert (req.percentiles, req.seed, req.warmup_requests) == ([50.0, 90.0, 99.0], 7, 3)


def test_request_rate_inf_with_a_cap_is_a_closed_loop() -> None:
    req = bench_cli._input(build_parser().parse_args(["bench", "--max-concurrency", "16", "--num-prompts", "64"]))
    assert (req.url, req.concurrency, req.rate, req.num_prompts) == ("http://127.0.0.1:8000", 16, None, 64)
    everything = bench_cli._input(build_parser().parse_args(["bench", "--num-prompts", "64"]))
    assert everything.concurrency == 64  # every request at t=0, as vllm bench serve sends them
    sharegpt = bench_cli._input(build_parser().parse_args(
        ["bench", "--dataset-name", "sharegpt", "--dataset-path", "x.json", "--request-rate", "2"]))
    assert not sharegpt.ignore_eos and sharegpt.dataset_kind == "sharegpt"


def test_a_vllm_bench_serve_command_line_runs_and_saves_where_vllm_would(tmp_path: Path) -> None:
    from support_bench import start_stream_server

    with start_stream_server(5, 1) as server:
        line = ["bench", "--backend", "vllm", "--base-url", server.url, "--dataset-name", "random",
                "--random-input-len", "12", "--random-output-len", "6", "--random-range-ratio", "0.5",
                "--max-concurrency", "4", "--num-prompts", "40", "--goodput", "ttft:500", "--seed", "3",
                "--save-result", "--result-dir", str(tmp_path), "--result-filename", "run.json", "--json"]
        proc = subprocess.run([*_cli(), *line], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-1500:]
    out = json.loads(proc.stdout)
    assert out["result"]["completed"] == 40 and out["result"]["request_goodput"] is not None
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["completed"] == 40 and saved["provenance"]["load"]["concurrency"] == 4
    lens = saved["input_lens"]
    assert min(lens) >= 6 and max(lens) <= 18 and len(set(lens)) > 1  # spread in [12*0.5, 12*1.5]
    assert saved["provenance"]["workload"]["range_ratio"] == 0.5


def _cli() -> list[str]:
    import sys

    return [sys.executable, "-m", "vllm_tune.cli"]
