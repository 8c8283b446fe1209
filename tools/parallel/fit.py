"""Fit the estimator's constants to measured serving results, and score any estimator on them.

Pure Python (no numpy): `vllm-tune calibrate` runs the same fit on a user's machine. The optimiser is a
deterministic Nelder-Mead over log-parameters with bounds, restarted from its best point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vllm_tune.tools.models.catalog import catalog_model, get_gpu
from vllm_tune.tools.models.facts import GpuSpec, ModelFacts
from vllm_tune.tools.parallel.io import Layout, MemoryBreakdown
from vllm_tune.tools.parallel.measured import MeasuredRow
from vllm_tune.tools.parallel.memory import served_facts, weights_per_gpu
from vllm_tune.tools.parallel.params import EstimatorParams, Residuals, gpu_family
from vllm_tune.tools.parallel.predict import default_max_num_seqs, layout_of, memory_at, predict

# Offline engines batch up to their own cap. TensorRT-LLM's trtllm-bench picks max_batch_size per run; 2048 is
# the upper value its perf-overview runs use (assumption for rows that do not state it).
ENGINE_MAX_SEQS = {"tensorrt-llm": 2048, "sglang": 1024}
# NVIDIA's ModelOpt FP8 / NVFP4 checkpoints, which TensorRT-LLM's perf overview runs, carry an FP8 KV cache
# (hf_quant_config.json kv_cache_quant_algo FP8, e.g. nvidia/Llama-3.1-70B-Instruct-FP8 as shipped in
# aiconfigurator_core/model_configs); rows that do not state their KV dtype are read that way.
TRTLLM_FP8_KV_WEIGHTS = ("fp8", "nvfp4")
# TensorRT-LLM gives the KV cache a fraction of the memory left after the weights (kv_cache_free_gpu_mem_fraction,
# 0.9 by default) instead of vLLM's fraction of the whole GPU.
TRTLLM_FREE_FRACTION = 0.9
RANK_GAP = 0.15
QUANT_OF = {"fp8": "fp8", "nvfp4": "nvfp4", "mxfp4": "mxfp4"}


Metric = str  # "output_tok_s" | "tpot_ms" | "e2e_ms"


@dataclass(frozen=True)
class Point:
    """One measured figure of a row, prepared for estimation: facts, hardware, layout and memory fixed once."""

    row: MeasuredRow
    facts: ModelFacts
    gpu: GpuSpec
    layout: Layout
    memory: MemoryBreakdown
    max_num_seqs: int
    metric: Metric = "output_tok_s"
    measured: float = 0.0


def _metrics(row: MeasuredRow) -> list[tuple[Metric, float]]:
    """The figures of a row the estimator can be held against."""
    out: list[tuple[Metric, float]] = []
    if row.output_tok_s is not None:
        out.append(("output_tok_s", row.output_tok_s))
    step = row.tpot_ms or (row.itl_ms if row.itl_ms is not None and row.itl_ms.stat in ("mean", "median", "p50")
                           else None)
    if step is not None and row.load.kind in ("concurrency", "request_rate", "static_batch"):
        out.append(("tpot_ms", step.ms))
    if row.e2e_ms is not None and row.load.kind == "static_batch":
        out.append(("e2e_ms", row.e2e_ms.ms))
    return out


def prepare(rows: Sequence[MeasuredRow]) -> tuple[list[Point], list[tuple[str, str]]]:
    """Points the estimator can evaluate, and (row id, why) for the rows it cannot."""
    points: list[Point] = []
    skipped: list[tuple[str, str]] = []
    for row in rows:
        metrics = _metrics(row)
        if not metrics:
            skipped.append((row.id, "no figure the estimator models (deployment-wide output tok/s, TPOT/ITL at a "
                                    "known load, or a static batch's latency)"))
            continue
        if not (row.model_in_catalog and row.gpu_in_catalog):
            skipped.append((row.id, "model or GPU not in the catalogs"))
            continue
        base = catalog_model(row.model)
        if base is None:
            skipped.append((row.id, f"catalog does not resolve {row.model}"))
            continue
        quant = QUANT_OF.get(row.weights_dtype)
        if base.quant.quant_method is not None and (quant is None or quant == "fp8"
                                                    or base.quant.weight_dtype in ("nvfp4", "mxfp4")):
            quant = None  # the checkpoint is already quantized as published (e.g. gpt-oss MXFP4, R1 FP8)
        try:
            facts = served_facts(base, quant)[0]
            gpu = get_gpu(row.gpu)
        except Exception as exc:  # a fact the catalogs cannot give: keep the row out, say why
            skipped.append((row.id, str(exc)))
            continue
        if gpu.bandwidth_tbs is None or not gpu.tflops:
            skipped.append((row.id, f"{gpu.name} has no bandwidth/FLOPS facts"))
            continue
        layout = layout_of(row.tp, row.pp, row.dp, row.ep, moe=facts.moe is not None)
        max_len = max(row.isl + row.osl, 1024)
        kv = _kv_dtype(row)
        util = 0.9
        if row.engine == "tensorrt-llm":
            w = weights_per_gpu(facts, layout) / 2**30
            util = min(0.99, (w + TRTLLM_FREE_FRACTION * max(gpu.memory_gib - w, 0.0)) / gpu.memory_gib)
        mem = memory_at(facts, gpu, layout, isl=row.isl, osl=row.osl, max_model_len=max_len, kv_cache_dtype=kv,
                        gpu_memory_utilization=util)
        if mem.kv_cache_gib <= 0:
            skipped.append((row.id, "does not fit in the planner's memory model"))
            continue
        seqs = int(row.load.value) if row.load.kind == "max_batch" and row.load.value else \
            ENGINE_MAX_SEQS.get(row.engine, default_max_num_seqs(gpu))
        for metric, value in metrics:
            points.append(Point(row=row, facts=facts, gpu=gpu, layout=layout, memory=mem, max_num_seqs=seqs,
                                metric=metric, measured=value))
    return points, skipped


def _kv_dtype(row: MeasuredRow) -> str:
    if row.kv_cache_dtype:
        return "fp8" if row.kv_cache_dtype.startswith("fp8") else "auto"
    if row.engine == "tensorrt-llm" and row.weights_dtype in TRTLLM_FP8_KV_WEIGHTS:
        return "fp8"
    return "auto"


def estimate_point(p: Point, params: EstimatorParams) -> float | None:
    """Our figure (same metric and unit) for a measured point's configuration and load."""
    load = p.row.load
    conc = load.value if load.kind in ("concurrency", "static_batch") else None
    if load.kind == "offline" and load.num_prompts:
        conc = float(load.num_prompts)  # an offline run never has more in flight than it submitted
    rate = load.value if load.kind == "request_rate" else None
    kv = _kv_dtype(p.row)
    est = predict(p.facts, p.gpu, p.layout, p.memory, isl=p.row.isl, osl=p.row.osl, concurrency=conc, rate=rate,
                  params=params, kv_cache_dtype=kv, max_num_seqs=p.max_num_seqs, engine=p.row.engine)
    if est is None:
        return None
    if p.metric == "tpot_ms":
        return est.tpot_ms
    if p.metric == "e2e_ms":
        return est.ttft_ms + (p.row.osl - 1) * est.tpot_ms  # a static batch: all prompts, then every step
    return est.output_tokens_per_s


def abs_errors(estimates: Sequence[float | None], points: Sequence[Point]) -> list[float]:
    return [abs(e / p.measured - 1) for e, p in zip(estimates, points, strict=True) if e is not None]


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (as numpy's default)."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def residuals(errors: Sequence[float], kind: str) -> Residuals:
    return Residuals(points=len(errors), median=round(quantile(errors, 0.5), 4), p90=round(quantile(errors, 0.9), 4),
                     worst=round(max(errors) if errors else math.nan, 4), kind=kind)


def ranking_pairs(points: Sequence[Point], gap: float = RANK_GAP) -> list[tuple[int, int]]:
    """(better, worse) index pairs: same model, GPU, dtype, engine and workload, different layout, and a
    measured per-GPU gap of at least `gap`."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, p in enumerate(points):
        if p.metric != "output_tok_s":
            continue
        r = p.row
        key = (r.model, r.gpu, r.weights_dtype, r.engine, r.engine_version, r.isl, r.osl, r.load.kind, r.load.value)
        groups.setdefault(key, []).append(i)
    pairs: list[tuple[int, int]] = []
    for members in groups.values():
        for a in members:
            for b in members:
                if a >= b or points[a].layout == points[b].layout:
                    continue
                pa = points[a].measured / points[a].row.gpu_count
                pb = points[b].measured / points[b].row.gpu_count
                if pa >= pb * (1 + gap):
                    pairs.append((a, b))
                elif pb >= pa * (1 + gap):
                    pairs.append((b, a))
    return pairs


def rankings_right(estimates: Sequence[float | None], points: Sequence[Point],
                   pairs: Sequence[tuple[int, int]]) -> tuple[int, int, list[tuple[str, str]]]:
    """(right, comparable, wrong pairs as row ids) for per-GPU estimates."""
    right = 0
    total = 0
    wrong: list[tuple[str, str]] = []
    for a, b in pairs:
        ea, eb = estimates[a], estimates[b]
        if ea is None or eb is None:
            continue
        total += 1
        if ea / points[a].row.gpu_count > eb / points[b].row.gpu_count:
            right += 1
        else:
            wrong.append((points[a].row.id, points[b].row.id))
    return right, total, wrong


# ----- the optimiser -----------------------------------------------------------------------------------------


def nelder_mead(f: Callable[[list[float]], float], x0: list[float], *, step: float = 0.3, iters: int = 600,
                tol: float = 1e-7) -> tuple[list[float], float]:
    """Minimise f from x0 (deterministic); returns (x, f(x))."""
    n = len(x0)
    simplex = [list(x0)]
    for i in range(n):
        x = list(x0)
        x[i] += step
        simplex.append(x)
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda k: values[k])
        simplex = [simplex[k] for k in order]
        values = [values[k] for k in order]
        if abs(values[-1] - values[0]) <= tol * (abs(values[0]) + 1e-12):
            break
        centroid = [sum(x[i] for x in simplex[:-1]) / n for i in range(n)]
        worst = simplex[-1]
        refl = [c + (c - w) for c, w in zip(centroid, worst, strict=True)]
        fr = f(refl)
        if fr < values[0]:
            exp = [c + 2 * (c - w) for c, w in zip(centroid, worst, strict=True)]
            fe = f(exp)
            simplex[-1], values[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(centroid, worst, strict=True)]
            fc = f(con)
            if fc < values[-1]:
                simplex[-1], values[-1] = con, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, xs, strict=True)] for xs in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    k = min(range(n + 1), key=lambda j: values[j])
    return simplex[k], values[k]


def minimise(f: Callable[[list[float]], float], x0: list[float], *, rounds: int = 3,
             iters: int = 600) -> tuple[list[float], float]:
    """Nelder-Mead restarted from its best point with a shrinking simplex (escapes early collapse)."""
    x, fx = list(x0), f(x0)
    step = 0.4
    for _ in range(rounds):
        x, fx = nelder_mead(f, x, step=step, iters=iters)
        step *= 0.5
    return x, fx


# ----- the bundled fit ---------------------------------------------------------------------------------------

# (name, initial value, lower, upper): fitted in log space within the bounds.
FREE: list[tuple[str, float, float, float]] = [
    ("bw_efficiency", 0.7, 0.2, 1.0),
    ("flops.bf16", 0.5, 0.1, 1.0),
    ("flops.fp8", 0.5, 0.1, 1.0),
    ("flops.fp4", 0.4, 0.05, 1.0),
    ("step_fixed_ms", 2.0, 0.05, 50.0),
    ("layer_fixed_us", 10.0, 0.1, 200.0),
    ("seq_fixed_us", 10.0, 0.1, 500.0),
    ("moe_layer_fixed_us", 10.0, 0.1, 1000.0),
    ("tp_loss", 0.1, 0.001, 2.0),
    ("ar.nvlink", 15.0, 2.0, 200.0),
    ("ar.pcie_ratio", 3.0, 1.0, 20.0),  # PCIe all-reduce latency as a multiple of NVLink's (never faster)
    ("link_efficiency", 0.5, 0.05, 1.0),
    ("moe_efficiency", 0.7, 0.1, 1.5),
]
FAMILY_PRIOR = 0.05  # ridge weight pulling each family multiplier towards 1 (log space)


HUBER = 0.25  # log-error beyond which a point counts linearly (robust to the table's odd deployments)
LATENCY_WEIGHT = 0.3  # weight of a TPOT / latency point against a throughput point (the targets are on throughput)
RANK_WEIGHT = 20.0  # hinge weight on a measured ranking (gap >= 15%) the estimate orders wrongly


def _loss(r: float) -> float:
    a = abs(r)
    return a * a if a <= HUBER else HUBER * (2 * a - HUBER)


def _clamp(v: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, v))


def params_from(x: Sequence[float], families: Sequence[str], engines: Sequence[str]) -> EstimatorParams:
    vals = {name: _clamp(math.exp(v), lo, hi) for v, (name, _, lo, hi) in zip(x, FREE, strict=False)}
    rest = list(x[len(FREE):])
    fam = {f: _clamp(math.exp(rest[i]), 0.3, 3.0) for i, f in enumerate(families)}
    eng = {e: _clamp(math.exp(rest[len(families) + i]), 0.3, 3.0) for i, e in enumerate(engines)}
    return EstimatorParams(
        bw_efficiency=vals["bw_efficiency"],
        flops_efficiency={"bf16": vals["flops.bf16"], "fp8": vals["flops.fp8"], "fp4": vals["flops.fp4"]},
        step_fixed_ms=vals["step_fixed_ms"], layer_fixed_us=vals["layer_fixed_us"], seq_fixed_us=vals["seq_fixed_us"],
        moe_layer_fixed_us=vals["moe_layer_fixed_us"], tp_loss=vals["tp_loss"],
        # One latency for both switched GPU fabrics: the table has no MI300X TP sweep to fit xGMI on its own.
        allreduce_latency_us={"nvlink": vals["ar.nvlink"], "pcie": vals["ar.nvlink"] * vals["ar.pcie_ratio"],
                              "xgmi": vals["ar.nvlink"], "unknown": vals["ar.nvlink"] * vals["ar.pcie_ratio"]},
        link_efficiency=vals["link_efficiency"], moe_efficiency=vals["moe_efficiency"],
        family_scale={"hopper": 1.0, **fam},
        engine_scale={"vllm": 1.0, **eng} if "vllm" not in engines else eng)


@dataclass
class FitResult:
    params: EstimatorParams
    errors: list[float]
    points: list[Point]
    skipped: list[tuple[str, str]]
    rank_right: int
    rank_total: int
    rank_wrong: list[tuple[str, str]]
    objective: float
    reference_engine: str


def fit(rows: Sequence[MeasuredRow], *, iters: int = 600, rounds: int = 3) -> FitResult:
    """Huber loss on log(estimate/measured) (latency points weighted LATENCY_WEIGHT), a ridge prior on family
    multipliers and a hinge penalty on measured rankings (gap >= 15%) the estimate gets wrong."""
    points, skipped = prepare(rows)
    families = sorted({gpu_family(p.gpu.name) for p in points} - {"hopper"})
    engines_seen = sorted({p.row.engine for p in points})
    # The planner describes vLLM; other engines get a fitted multiplier when vLLM rows anchor the base.
    reference = "vllm" if "vllm" in engines_seen else engines_seen[0]
    engines = [e for e in engines_seen if e != reference]
    pairs = ranking_pairs(points)
    x0 = [math.log(v) for _, v, _, _ in FREE] + [0.0] * (len(families) + len(engines))

    def objective(x: list[float]) -> float:
        params = params_from(x, families, engines)
        if reference != "vllm":
            params = params.model_copy(update={"engine_scale": {reference: 1.0, **{e: params.engine_scale.get(e, 1.0)
                                                                                  for e in engines}}})
        total = 0.0
        ests: list[float | None] = []
        for p in points:
            e = estimate_point(p, params)
            ests.append(e)
            weight = 1.0 if p.metric == "output_tok_s" else LATENCY_WEIGHT
            total += weight * _loss(math.log(e / p.measured) if e else 5.0)
        for a, b in pairs:
            ea, eb = ests[a], ests[b]
            if ea and eb:
                margin = math.log((ea / points[a].row.gpu_count) / (eb / points[b].row.gpu_count))
                if margin < 0.05:
                    total += RANK_WEIGHT * (0.05 - margin) ** 2
        total += FAMILY_PRIOR * sum(v * v for v in x[len(FREE):])
        return total / max(len(points), 1)

    x, fx = minimise(objective, x0, rounds=rounds, iters=iters)
    params = params_from(x, families, engines)
    if reference != "vllm":
        params = params.model_copy(update={"engine_scale": {reference: 1.0, **{e: params.engine_scale.get(e, 1.0)
                                                                              for e in engines}}})
    ests = [estimate_point(p, params) for p in points]
    errors = abs_errors(ests, points)
    right, total, wrong = rankings_right(ests, points, pairs)
    tput = [e for e, p in zip(errors, points, strict=True) if p.metric == "output_tok_s"]
    lat = [e for e, p in zip(errors, points, strict=True) if p.metric != "output_tok_s"]
    params = params.model_copy(update={"residuals": residuals(tput, "in-sample"),
                                       "latency_residuals": residuals(lat, "in-sample") if lat else None,
                                       "fitted_rows": sorted({p.row.id for p in points})})
    return FitResult(params=params, errors=errors, points=points, skipped=skipped, rank_right=right,
                     rank_total=total, rank_wrong=wrong, objective=fx, reference_engine=reference)
