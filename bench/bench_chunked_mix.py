"""Chunked prefill beside decoding streams on the suite's vLLM CPU server: what a chunk costs the streams around it.

What the what_if accuracy protocol's max_num_batched_tokens=256 case (700-token prompts, closed loop of 8) mixes in
one engine step: one prompt's chunk and the other requests' decode tokens. On one server started with
--max-num-batched-tokens 256 (engine core pinned apart, as the protocol runs it), three interleaved rounds of:

  wave     8 requests of 700 prompt tokens sent at once, with 2, 48 and 200 output tokens: how far apart their
           first tokens come (the prompts are chunked one after another; with longer outputs the earlier requests
           decode beside the later ones' chunks)
  mix      a closed loop of 7 short-prompt decoding streams alone, then beside one client sending 700-token prompts
           (2 output tokens) one after another: the streams' TPOT, and that client's TTFT alone and beside them

A step model whose costs add up (what_if's StepModel: fixed + per decode sequence + per prefill token) predicts
the wave's spacing and the mix's TPOT from the calibration; this prints the measurements to hold it against
(knowledge/entries/whatif.yaml, whatif.calibration-log). Run it under the shared lock on an otherwise idle box:

    flock /tmp/vllm-tune-integration.lock .venv/bin/python bench/bench_chunked_mix.py
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.cpu_split import on_frontend_cores, split_cores
from support.tiny_models import ensure_tiny_models
from support.vllm_server import start_vllm

from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark

ROUNDS = 3
BUDGET = 256
PROMPT = 700
WAVE = 8
WAVE_OUTPUTS = (2, 48, 200)
STREAMS = 7


async def _run(req: RunBenchmarkInput) -> dict[str, Any]:
    out = await run_benchmark(req)
    if out.result is None:
        raise SystemExit(f"a run ended {out.state}: {'; '.join(out.warnings)}")
    return out.result.model_dump()


def wave_spacing(ttfts_s: list[float]) -> float:
    """Mean ms between consecutive first tokens of a wave sent at once (sorted)."""
    t = sorted(ttfts_s)
    return (t[-1] - t[0]) * 1e3 / (len(t) - 1)


async def main() -> int:
    model = ensure_tiny_models(build=False).llama
    split = split_cores()
    print(f"--max-num-batched-tokens {BUDGET}, {PROMPT}-token prompts; engine core "
          f"{'on cores of its own' if split else 'sharing the cores (one CPU)'}; ms\n")
    print("| round | wave of 8, output 2 / 48 / 200: first-token spacing | 7 streams' TPOT alone / beside the "
          "prompts | prompt client's TTFT alone / beside the streams |")
    print("|---:|---:|---:|---:|")
    with on_frontend_cores(split):
        server = await asyncio.to_thread(start_vllm, model, ["--max-num-batched-tokens", str(BUDGET)], split=split)
        try:
            seed = 9700
            for rnd in range(1, ROUNDS + 1):
                spacing = []
                for out_len in WAVE_OUTPUTS:
                    seed += 1
                    r = await _run(RunBenchmarkInput(url=server.url, seed=seed, warmup_requests=2,
                                                     concurrency=WAVE, input_len=PROMPT, output_len=out_len,
                                                     num_prompts=WAVE))
                    spacing.append(wave_spacing(r["ttfts"]))
                streams = RunBenchmarkInput(url=server.url, seed=seed + 1, warmup_requests=1, concurrency=STREAMS,
                                            input_len=32, output_len=300, num_prompts=2 * STREAMS)
                prompts = RunBenchmarkInput(url=server.url, seed=seed + 2, warmup_requests=0, concurrency=1,
                                            input_len=PROMPT, output_len=2, num_prompts=60)
                alone = await _run(streams)
                prompts_alone = await _run(prompts.model_copy(update={"seed": seed + 3, "num_prompts": 20}))
                beside, prompts_beside = await asyncio.gather(
                    _run(streams.model_copy(update={"seed": seed + 4})), _run(prompts))
                seed += 10
                print(f"| {rnd} | {' / '.join(f'{s:.1f}' for s in spacing)} | {alone['mean_tpot_ms']:.2f} / "
                      f"{beside['mean_tpot_ms']:.2f} | {prompts_alone['mean_ttft_ms']:.1f} / "
                      f"{prompts_beside['mean_ttft_ms']:.1f} |", flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

