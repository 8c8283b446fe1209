"""One estimate for one layout at one load: memory, KV capacity, the step-time model and Little's law for rates.

Shared by the planner, the fit of the estimator's constants, the accuracy benchmark and `vllm-tune calibrate`.
"""

from __future__ import annotations

from vllm_tune.tools.models.facts import GpuSpec, ModelFacts
from vllm_tune.tools.parallel.estimate import estimate_for
from vllm_tune.tools.parallel.io import Estimate, Layout, MemoryBreakdown
from vllm_tune.tools.parallel.memory import memory_for
from vllm_tune.tools.parallel.params import EstimatorParams, HardwareCalibration

# Offline runs (every prompt submitted at once) are modelled as this many requests in flight; the KV cache and
# max_num_seqs cap what a replica really runs.
OFFLINE_CONCURRENCY = 100_000.0


def default_max_num_seqs(gpu: GpuSpec) -> int:
    """vLLM's device-gated default for --max-num-seqs (see flag.max-num-seqs)."""
    return 1024 if gpu.memory_gib >= 70 and not gpu.name.upper().startswith("A100") else 256


def layout_of(tp: int, pp: int, dp: int, ep: int, *, moe: bool) -> Layout:
    """A Layout from TP/PP/DP/EP sizes as measurement tables give them (dense DP = independent replicas)."""
    if moe and ep > 1:
        return Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp,
                      enable_expert_parallel=True, expert_parallel_size=tp * dp, gpus_used=tp * pp * dp)
    if moe and dp > 1:
        return Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=1,
                      enable_expert_parallel=False, expert_parallel_size=1, replicas=dp, gpus_used=tp * pp * dp)
    return Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp,
                  enable_expert_parallel=False, expert_parallel_size=1, gpus_used=tp * pp * dp)


def memory_at(facts: ModelFacts, gpu: GpuSpec, layout: Layout, *, isl: int, osl: int, max_model_len: int,
              kv_cache_dtype: str = "auto", gpu_memory_utilization: float = 0.9) -> MemoryBreakdown:
    return memory_for(facts, gpu, layout, gpu_memory_utilization=gpu_memory_utilization,
                      kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len, workload_len=isl + osl / 2)


def predict(facts: ModelFacts, gpu: GpuSpec, layout: Layout, memory: MemoryBreakdown, *, isl: int, osl: int,
            concurrency: float | None, rate: float | None, params: EstimatorParams,
            calibration: HardwareCalibration | None = None, kv_cache_dtype: str = "auto",
            interconnect: str | None = None, domain: int | None = None, max_num_seqs: int | None = None,
            engine: str = "vllm", slo_ttft_ms: float | None = None,
            slo_tpot_ms: float | None = None) -> Estimate | None:
    """Estimate at a closed-loop concurrency (total), an open-loop rate, or offline when both are None."""
    link = interconnect or gpu.interconnect.kind
    fabric = domain or gpu.gpus_per_node
    seqs = max_num_seqs if max_num_seqs is not None else default_max_num_seqs(gpu)

    def run(conc: float) -> Estimate | None:
        return estimate_for(facts, gpu, layout, memory, isl=isl, osl=osl, concurrency_total=conc,
                            kv_cache_dtype=kv_cache_dtype, interconnect=link, gpus_per_node=fabric,
                            slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, params=params,
                            calibration=calibration, max_num_seqs=seqs, engine=engine)

    if rate is None:
        return run(concurrency if concurrency is not None else OFFLINE_CONCURRENCY)
    # Little's law: in-flight requests = rate x time in system; iterate to a fixed point. Past saturation the
    # replica runs full and the output rate is its capacity.
    conc = max(1.0, rate)
    est: Estimate | None = None
    for _ in range(30):
        est = run(conc)
        if est is None:
            return None
        latency_s = (est.ttft_ms + osl * est.tpot_ms) / 1e3
        new = max(1.0, rate * latency_s)
        if abs(new - conc) <= 1e-3 * conc:
            break
        conc = 0.5 * (conc + new)
    if est is not None:
        offered = rate * osl
        if est.output_tokens_per_s > offered:
            est = est.model_copy(update={"output_tokens_per_s": offered,
                                         "output_tokens_per_s_per_gpu": offered / layout.gpus_used})
    return est
