"""Kernel timing backends for the tuner.

``CostModelTimer`` and ``CpuBlockedMatmulTimer`` are TEST backends: they exist so the search, checkpoint, resume and
file-writing logic can be exercised on a machine without a GPU. Their "best" configs mean nothing for a real GPU.
``TritonTimer`` times vLLM's own Triton fused-MoE entry point on the current CUDA device; torch and vllm are imported
inside it only, never when this module is imported.
"""

from __future__ import annotations

import time
from typing import Any

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.search_space import KernelConfig, TuneShape


class CostModelTimer:
    """Deterministic analytic cost (no clock): padded work per tile plus a per-tile launch overhead and a penalty for
    wasted M rows. Same input -> same number, so resumed runs can be compared exactly. Test backend only."""

    def __init__(self, fail_if: Any = None) -> None:
        self.calls = 0
        self._fail_if = fail_if

    def time_config(self, shape: TuneShape, batch_size: int, config: KernelConfig) -> float:
        self.calls += 1
        if self._fail_if is not None and self._fail_if(config):
            raise RuntimeError("simulated kernel failure")
        bm, bn, bk = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"], config["BLOCK_SIZE_K"]
        rows = max(1, batch_size * shape.top_k)
        per_expert = -(-rows // max(shape.E, 1))
        m_tiles = shape.E * -(-per_expert // bm)
        n_tiles = -(-2 * shape.N // bn)
        k_steps = -(-shape.hidden_size // bk)
        work = m_tiles * n_tiles * k_steps * bm * bn * bk
        overhead = m_tiles * n_tiles * (40 + 6 * config["num_stages"]) * (1.0 + 0.05 * config["num_warps"])
        group_bonus = 1.0 - 0.02 * (config["GROUP_SIZE_M"] > 1)
        return (work * 1e-12 + overhead * 1e-9) * group_bonus


class CpuBlockedMatmulTimer:
    """Really times a small pure-python blocked matmul whose tiling follows the config (sizes scaled down by
    ``scale`` so one point takes milliseconds). Numbers are noisy and CPU-specific. Test backend only."""

    def __init__(self, scale: int = 16, repeats: int = 1) -> None:
        self.scale = max(1, scale)
        self.repeats = max(1, repeats)

    def time_config(self, shape: TuneShape, batch_size: int, config: KernelConfig) -> float:
        s = self.scale
        m = max(1, min(64, batch_size * shape.top_k // max(shape.E, 1) or 1))
        n = max(2, min(64, 2 * shape.N // (s * s)))
        k = max(2, min(64, shape.hidden_size // (s * s)))
        bm, bn, bk = (max(1, config[key] // s) for key in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"))
        a = [[(i * 7 + j) % 5 - 2.0 for j in range(k)] for i in range(m)]
        b = [[(i * 3 + j) % 7 - 3.0 for j in range(n)] for i in range(k)]
        best = float("inf")
        for _ in range(self.repeats):
            out = [[0.0] * n for _ in range(m)]
            t0 = time.perf_counter()
            for i0 in range(0, m, bm):
                for j0 in range(0, n, bn):
                    for k0 in range(0, k, bk):
                        for i in range(i0, min(i0 + bm, m)):
                            row, arow = out[i], a[i]
                            for kk in range(k0, min(k0 + bk, k)):
                                av, brow = arow[kk], b[kk]
                                for j in range(j0, min(j0 + bn, n)):
                                    row[j] += av * brow[j]
            best = min(best, time.perf_counter() - t0)
        return best


class TritonTimer:
    """Times vLLM's Triton fused-MoE kernel (``fused_experts`` under ``override_config``) on the current CUDA device
    with random weights of the exact shape. Supports bf16/fp16 weights and fp8_w8a8 (per-tensor or block)."""

    def __init__(self, iterations: int = 20, warmup: int = 3, act_dtype: str = "bfloat16") -> None:
        self.iterations = iterations
        self.warmup = warmup
        self.act_dtype = act_dtype
        self._cache: dict[tuple[TuneShape, int], Any] = {}

    def _inputs(self, shape: TuneShape, batch_size: int) -> Any:
        import torch  # type: ignore[import-not-found]  # GPU machines only

        key = (shape, batch_size)
        if key in self._cache:
            return self._cache[key]
        self._cache.clear()
        act = getattr(torch, self.act_dtype)
        dev = torch.device("cuda")
        gen = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(batch_size, shape.hidden_size, device=dev, dtype=act, generator=gen)
        w1 = torch.randn(shape.E, 2 * shape.N, shape.hidden_size, device=dev, dtype=act, generator=gen) / 16
        w2 = torch.randn(shape.E, shape.hidden_size, shape.N, device=dev, dtype=act, generator=gen) / 16
        logits = torch.randn(batch_size, shape.E, device=dev, dtype=torch.float32, generator=gen)
        weights, ids = torch.topk(torch.softmax(logits, dim=-1), shape.top_k, dim=-1)
        quant = None
        if shape.dtype == "fp8_w8a8":
            from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config  # type: ignore[import-not-found]

            fp8 = torch.float8_e4m3fn
            w1, w2 = w1.to(fp8), w2.to(fp8)
            if shape.block_shape:
                bn, bk = shape.block_shape
                s1 = torch.ones(shape.E, -(-2 * shape.N // bn), -(-shape.hidden_size // bk), device=dev)
                s2 = torch.ones(shape.E, -(-shape.hidden_size // bn), -(-shape.N // bk), device=dev)
                quant = fp8_w8a8_moe_quant_config(w1_scale=s1, w2_scale=s2, block_shape=[bn, bk])
            else:
                one = torch.ones(shape.E, device=dev)
                unit = torch.ones(1, device=dev)
                quant = fp8_w8a8_moe_quant_config(w1_scale=one, w2_scale=one.clone(), a1_scale=unit,
                                                  a2_scale=unit.clone())
        elif shape.dtype is not None:
            raise BadInputError(f"the Triton timing backend does not handle dtype {shape.dtype} yet; "
                                "use vLLM's benchmarks/kernels/benchmark_moe.py for it")
        self._cache[key] = (x, w1, w2, weights, ids.to(torch.int32), quant)
        return self._cache[key]

    def time_config(self, shape: TuneShape, batch_size: int, config: KernelConfig) -> float:
        import torch
        from vllm.model_executor.layers.fused_moe import override_config  # type: ignore[import-not-found]
        from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts  # type: ignore[import-not-found]

        x, w1, w2, weights, ids, quant = self._inputs(shape, batch_size)
        with override_config(dict(config)):
            for _ in range(self.warmup):
                fused_experts(x, w1, w2, weights, ids, quant_config=quant)
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(self.iterations):
                fused_experts(x, w1, w2, weights, ids, quant_config=quant)
            end.record()
            torch.cuda.synchronize()
        return float(start.elapsed_time(end)) / 1000.0 / self.iterations


def make_timer(backend: str) -> CostModelTimer | CpuBlockedMatmulTimer | TritonTimer:
    if backend == "cost-model":
        return CostModelTimer()
    if backend == "cpu":
        return CpuBlockedMatmulTimer()
    if backend == "triton":
        return TritonTimer()
    raise BadInputError(f"unknown timing backend {backend!r}; use triton, cpu or cost-model")
