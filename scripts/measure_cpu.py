"""Measure this machine's memory bandwidth and matmul throughput for the planner's CPU hardware entry.

The `CPU` entry of knowledge/catalog/gpus.yaml (used with vLLM's CPU backend, e.g. the test suite's server) takes
its bandwidth and FLOPS from this script, run on the machine the suite runs on:

    python scripts/measure_cpu.py

Bandwidth: best of several passes copying a 256 MiB float32 array (read + write bytes counted). FLOPS: best of
several 2048^3 float32 matmuls (numpy's BLAS, all cores); vLLM's CPU backend computes in bf16 through oneDNN,
so this is a lower bound on its peak. Noisy on a shared box: take the best pass, not the mean.
"""

from __future__ import annotations

import os
import platform
import time

import numpy as np


def bandwidth_gbs(repeat: int = 8) -> float:
    src = np.ones(64 * 2**20, dtype=np.float32)  # 256 MiB
    dst = np.empty_like(src)
    best = 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        np.copyto(dst, src)
        elapsed = time.perf_counter() - start
        best = max(best, 2 * src.nbytes / elapsed / 1e9)
    return best


def matmul_tflops(n: int = 2048, repeat: int = 5) -> float:
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    a @ b  # warm the BLAS threads
    best = 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        a @ b
        elapsed = time.perf_counter() - start
        best = max(best, 2 * n**3 / elapsed / 1e12)
    return best


def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs")
    print(f"memory bandwidth (copy, best pass): {bandwidth_gbs():.1f} GB/s")
    print(f"float32 matmul (best pass): {matmul_tflops():.3f} TFLOPS")


if __name__ == "__main__":
    main()
