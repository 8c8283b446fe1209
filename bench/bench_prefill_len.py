"""How a prompt's prefill time grows with its length on the suite's vLLM CPU server: linear, or faster?

what_if's step model charges a prefill a cost per prompt token (StepModel.per_prefill_token_s). Attention makes
each prompt token also attend to every token before it, a cost that grows with the square of the prompt length;
this measures whether that shows on the server. One server (vLLM's defaults, engine core pinned apart as the
accuracy protocol runs it), one request at a time, prompts of 64 to 1000 tokens with 4 output tokens, three
interleaved rounds; the server's own mean prefill time (first scheduled to first token, from its histograms over
each run) leaves the API server's hand-off out. It prints each length's prefill time per round, then least-squares
fits of a + b n (linear) and a + b n + c n^2 / 2 (with a cost per token pair) over every run, with their RMS
residuals. The numbers behind whatif.calibration-log's note on prefill pairs. Run it on an otherwise idle box:

    flock /tmp/vllm-tune-integration.lock .venv/bin/python bench/bench_prefill_len.py
"""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.cpu_split import on_frontend_cores, split_cores
from support.tiny_models import ensure_tiny_models
from support.vllm_server import start_vllm

from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark
from vllm_tune.tools.whatif.fit import least_squares

LENGTHS = (64, 256, 512, 768, 1000)  # the tiny model's max_model_len is 1024
ROUNDS = 3
PROMPTS = 12


def fit_rms(points: list[tuple[int, float]], quadratic: bool) -> tuple[list[float], float]:
    """Coefficients (a, b[, c]) of prefill ms over prompt tokens n, and the RMS residual in ms."""
    rows = [[1.0, float(n), *([n * n / 2.0] if quadratic else [])] for n, _ in points]
    ys = [ms for _, ms in points]
    coef = least_squares(rows, ys, [True] * len(rows[0]))
    if coef is None:
        raise SystemExit("the lengths cannot separate the fit's terms")
    rms = math.sqrt(sum((sum(c * x for c, x in zip(coef, row, strict=True)) - y) ** 2
                        for row, y in zip(rows, ys, strict=True)) / len(ys))
    return coef, rms


async def main() -> int:
    model = ensure_tiny_models(build=False).llama
    split = split_cores()
    print(f"one request at a time, 4 output tokens, {PROMPTS} prompts a run; engine core "
          f"{'on cores of its own' if split else 'sharing the cores (one CPU)'}; server mean prefill ms\n")
    print("| round | " + " | ".join(f"{n} tokens" for n in LENGTHS) + " |")
    print("|---:|" + "---:|" * len(LENGTHS))
    points: list[tuple[int, float]] = []
    with on_frontend_cores(split):
        server = await asyncio.to_thread(start_vllm, model, [], split=split)
        try:
            for rnd in range(1, ROUNDS + 1):
                cells = []
                for n in LENGTHS:
                    out = await run_benchmark(RunBenchmarkInput(url=server.url, concurrency=1, num_prompts=PROMPTS,
                                                                input_len=n, output_len=4, seed=1000 * rnd + n,
                                                                warmup_requests=1))
                    window = (out.result.model_dump().get("server") or {}) if out.result is not None else {}
                    prefill = window.get("server_mean_prefill_time_ms")
                    if prefill is None:
                        raise SystemExit(f"no server prefill time for {n} tokens ({out.state}): is /metrics on?")
                    points.append((n, float(prefill)))
                    cells.append(f"{prefill:.2f}")
                print(f"| {rnd} | " + " | ".join(cells) + " |", flush=True)
        finally:
            server.stop()
    (a, b), rms_lin = fit_rms(points, quadratic=False)
    (a2, b2, c2), rms_quad = fit_rms(points, quadratic=True)
    print(f"\nlinear:    {a:.2f} ms + {b * 1e3:.2f} us/token; RMS residual {rms_lin:.2f} ms")
    print(f"quadratic: {a2:.2f} ms + {b2 * 1e3:.2f} us/token + {c2 * 1e6:.1f} ns/token pair; "
          f"RMS residual {rms_quad:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
