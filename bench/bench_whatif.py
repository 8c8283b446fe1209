"""How fast the scheduler simulator runs: requests simulated per second of one core's CPU time.

The target is 10,000 requests in under 2 s. Three loads: an open-loop Poisson run below capacity, a
saturated closed loop (max_num_seqs sequences decoding every step) and a KV-starved run that preempts.

    .venv/bin/python bench/bench_whatif.py
"""

from __future__ import annotations

import time

from vllm_tune.tools.bench.api import RunBenchmarkInput
from vllm_tune.tools.whatif.results import load_from_request, summarize
from vllm_tune.tools.whatif.simulate import EngineConfig, StepModel, run

STEP = StepModel(fixed_s=0.004, per_decode_seq_s=0.0002, per_prefill_token_s=0.00002, per_context_token_s=1e-7,
                 request_overhead_s=0.002)
CASES = [
    ("poisson 20 req/s, 512 in / 128 out", EngineConfig(num_gpu_blocks=50_000),
     RunBenchmarkInput(url="http://127.0.0.1:1", rate=20, num_prompts=10_000, input_len=512, output_len=128)),
    ("closed loop 256, 256 in / 128 out", EngineConfig(num_gpu_blocks=50_000, max_num_seqs=256),
     RunBenchmarkInput(url="http://127.0.0.1:1", concurrency=256, num_prompts=10_000, input_len=256,
                       output_len=128)),
    ("closed loop 128, KV for 40 requests", EngineConfig(num_gpu_blocks=1_000),
     RunBenchmarkInput(url="http://127.0.0.1:1", concurrency=128, num_prompts=10_000, input_len=256,
                       output_len=128)),
]


def main() -> None:
    print(f"{'load':40} {'requests':>9} {'steps':>8} {'preempt':>8} {'cpu s':>7} {'req/s':>9}")
    for name, cfg, req in CASES:
        load = load_from_request(req)
        t0 = time.process_time()
        trace = run(cfg, STEP, load)
        summarize(trace, load, cfg, STEP, percentiles=[50.0, 90.0, 99.0], slo_ms={"ttft": 1000})
        cpu = time.process_time() - t0
        n = len(load.lens)
        print(f"{name:40} {n:9d} {trace.steps:8d} {trace.total_preemptions:8d} {cpu:7.2f} {n / cpu:9.0f}")


if __name__ == "__main__":
    main()
