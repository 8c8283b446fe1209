"""plan --verify: measure the plan's first layout on a server the operator started with its command.

A short closed-loop run_benchmark at the plan's workload (isl/osl and the first candidate's requests per copy)
against that server, then estimate vs measured per metric. The server is one copy of the layout (one
`vllm serve`), so the estimate is taken per copy. The result is saved with the plan's serve flags and hardware in
its provenance, so `vllm-tune calibrate` can fit from it.
"""

from __future__ import annotations

from vllm_tune.tools.bench.api import MAX_CONCURRENCY, RunBenchmarkInput, run_benchmark
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.parallel.io import Candidate, MetricCheck, PlanInput, PlanOutput, Verification


def serve_flags_for(out: PlanOutput, cand: Candidate, request: PlanInput) -> dict[str, str]:
    """What calibrate needs to re-create the estimate: hardware, model and the layout's flags."""
    flags = {"hardware": out.hardware.name, "model": request.model, "command": cand.command,
             "tensor_parallel_size": str(cand.tensor_parallel_size),
             "pipeline_parallel_size": str(cand.pipeline_parallel_size),
             "data_parallel_size": str(cand.data_parallel_size)}
    if request.gpu_memory_gib is not None:
        flags["gpu_memory_gib"] = f"{request.gpu_memory_gib:g}"
    return flags


def _ratio(est: float | None, meas: float | None) -> float | None:
    if est is None or meas is None or meas <= 0:
        return None
    return round(est / meas, 4)


async def verify_plan(out: PlanOutput, request: PlanInput) -> Verification:
    """Run the short benchmark and compare; BadInputError when the plan has nothing to verify."""
    if request.verify_url is None:
        raise BadInputError("no verify URL given")
    if not out.candidates or out.candidates[0].estimate is None:
        raise BadInputError("the plan has no estimated candidate to verify")
    cand = out.candidates[0]
    est = cand.estimate
    assert est is not None
    conc = max(1, min(MAX_CONCURRENCY, round(est.concurrency_per_replica * cand.data_parallel_size)))
    prompts = max(request.verify_prompts, conc)
    # Warm-up requests keep a fresh server's first-request costs out of the measured window.
    bench = RunBenchmarkInput(url=request.verify_url, concurrency=conc, num_prompts=prompts, input_len=request.isl,
                              output_len=request.osl, warmup_requests=min(max(conc, 4), 16),
                              serve_flags=serve_flags_for(out, cand, request), save_result=request.verify_save_result,
                              confirm=request.verify_confirm, label=f"plan-verify {cand.label()}")
    result = await run_benchmark(bench)
    res = result.result
    copies = max(1, cand.replicas)
    est_tps = est.output_tokens_per_s / copies
    extra = res.model_extra or {} if res is not None else {}
    measured_tps = res.output_throughput if res is not None else None
    tpot = extra.get("mean_tpot_ms")
    ttft = extra.get("mean_ttft_ms")
    metrics = [
        MetricCheck(metric="output_tokens_per_s", estimate=round(est_tps, 3), measured=measured_tps,
                    ratio=_ratio(est_tps, measured_tps)),
        MetricCheck(metric="mean_tpot_ms", estimate=round(est.tpot_ms, 3), measured=tpot,
                    ratio=_ratio(est.tpot_ms, tpot)),
        MetricCheck(metric="mean_ttft_ms", estimate=round(est.ttft_ms, 3), measured=ttft,
                    ratio=_ratio(est.ttft_ms, ttft)),
    ]
    warnings = list(result.warnings)
    if cand.replicas > 1:
        warnings.append(f"the layout runs {cand.replicas} copies; the server measured is one copy, so the estimate "
                        f"is per copy ({est_tps:,.0f} of {est.output_tokens_per_s:,.0f} output tok/s)")
    return Verification(url=request.verify_url, layout=cand.label(), concurrency=conc, num_prompts=prompts,
                        result_path=result.result_path, metrics=metrics, warnings=warnings)
