"""Optional delegation to `vllm bench serve` when vLLM is installed, parsed into our result model.

Useful to cross-check our client against vLLM's own on the same server and workload. vLLM's CLI
imports torch (about 11 s on a small machine), so this is never the default. The interpreter is
found from VLLM_TUNE_VLLM_PYTHON, else the `vllm` console script on PATH. The API key travels only
in the child's environment (OPENAI_API_KEY, which vLLM's client reads), never on its command line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from vllm_tune.tools.bench.api import BenchResult, RunBenchmarkInput, check_target
from vllm_tune.tools.errors import BadInputError, TargetError, VllmTuneError
from vllm_tune.tools.net.http import SecretRedactor, api_key

ENV_PYTHON = "VLLM_TUNE_VLLM_PYTHON"
ENV_CLI = "VLLM_TUNE_VLLM_CLI"  # a script that runs vLLM's CLI with that interpreter (e.g. vllm_cli.py)


def vllm_command() -> list[str]:
    python = os.environ.get(ENV_PYTHON)
    if python:
        cli = os.environ.get(ENV_CLI)
        return [python, cli] if cli else [python, "-m", "vllm.entrypoints.cli.main"]
    exe = shutil.which("vllm")
    if exe:
        return [exe]
    raise VllmTuneError(f"vLLM is not installed here: install it or set {ENV_PYTHON} to a Python that has it")


def build_args(req: RunBenchmarkInput, base_url: str, model: str, tokenizer: str | None, out_dir: Path) -> list[str]:
    if req.dataset or req.prefix_len or req.trace or req.ramp_start_rate is not None:
        raise BadInputError("delegation to vllm bench serve supports the random workload with a rate or concurrency")
    args = ["bench", "serve", "--backend", "openai-chat" if req.endpoint == "chat" else "vllm",
            "--base-url", base_url, "--model", model, "--dataset-name", "random",
            "--random-input-len", str(req.input_len), "--random-output-len", str(req.output_len),
            "--num-prompts", str(req.num_prompts or 200), "--seed", str(req.seed), "--save-result",
            "--result-dir", str(out_dir), "--result-filename", "result.json",
            "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", ",".join(f"{p:g}" for p in req.percentiles), "--disable-tqdm"]
    if req.endpoint == "chat":
        args += ["--endpoint", "/v1/chat/completions"]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    if req.rate is not None:
        args += ["--request-rate", f"{req.rate:g}", "--burstiness", f"{req.burstiness:g}"]
        if req.max_concurrency:
            args += ["--max-concurrency", str(req.max_concurrency)]
    elif req.concurrency is not None:
        args += ["--request-rate", "inf", "--max-concurrency", str(req.concurrency)]
    if req.ignore_eos:
        args.append("--ignore-eos")
    if req.warmup_requests:
        args += ["--num-warmups", str(req.warmup_requests)]
    if req.slo:
        args += ["--goodput", *(f"{k}:{v:g}" for k, v in req.slo.items())]
    return args


def parse_result(path: Path) -> BenchResult:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TargetError(f"vllm bench serve wrote no readable result: {exc}") from None
    data.setdefault("endpoint_type", data.get("backend", "vllm"))
    data.setdefault("tokenizer_id", data.get("model_id", ""))
    data["vllm_tune"] = {"delegated_to": "vllm bench serve"}
    return BenchResult.model_validate(data)


def run_vllm_bench_serve(req: RunBenchmarkInput, *, model: str, tokenizer: str | None = None,
                         timeout_s: float = 3600.0) -> BenchResult:
    base = check_target(req)
    key = api_key()
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1"}
    if key:
        env["OPENAI_API_KEY"] = key
    with tempfile.TemporaryDirectory(prefix="vllm-tune-bench-") as tmp:
        cmd = vllm_command() + build_args(req, base, model, tokenizer, Path(tmp))
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        if proc.returncode != 0:
            tail = SecretRedactor([key] if key else None)((proc.stderr or proc.stdout)[-400:])
            raise TargetError(f"vllm bench serve failed (exit {proc.returncode}): {tail.strip()}")
        return parse_result(Path(tmp) / "result.json")
