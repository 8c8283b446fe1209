"""Check a tuned config the way vLLM will load it, and judge an end-to-end A/B run.

Offline check: the same lookup vLLM performs (tuned folder first, then the package's configs folder; first existing
file wins; ``triton_version`` dropped; keys are batch sizes and the closest one to M is used — fused_moe.py
L1131-1160 and L1431-1433 @0.32.0), plus a shape check of every entry. Where a vLLM install is at hand we also call
vLLM's own ``get_moe_configs`` in that interpreter with the GPU name patched in, which works on a CPU-only machine.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.files import read_bytes
from vllm_tune.tools.moe.logs import read_moe_log
from vllm_tune.tools.moe.naming import ConfigKey
from vllm_tune.tools.moe.writer import REQUIRED_KEYS

_MAX_RESULT_BYTES = 256 * 1024 * 1024


@dataclass
class LookupResult:
    file_name: str
    searched: list[str]
    found_at: str | None
    configs: dict[int, dict[str, int]] | None
    problems: list[str] = field(default_factory=list)


def validate_config_body(body: Any) -> list[str]:
    """Why vLLM would fail on (or misuse) this JSON; empty when it is well-formed."""
    if not isinstance(body, dict):
        return ["top level is not a JSON object"]
    problems = []
    sizes = [k for k in body if k != "triton_version"]
    if not sizes:
        problems.append("no batch-size entries")
    for key in sizes:
        if not str(key).isdigit() or int(key) < 1:
            problems.append(f"key {key!r} is not a positive batch size (vLLM does int(key))")
            continue
        cfg = body[key]
        if not isinstance(cfg, dict):
            problems.append(f"entry {key} is not an object")
            continue
        missing = [k for k in REQUIRED_KEYS if k not in cfg]
        if missing:
            problems.append(f"entry {key} lacks {', '.join(missing)}")
        bad = [k for k, v in cfg.items() if not isinstance(v, int) or isinstance(v, bool) or v < 1]
        if bad:
            problems.append(f"entry {key}: non-positive or non-integer {', '.join(bad)}")
    return problems


def lookup_like_vllm(key: ConfigKey, *, tuned_folder: str | None, package_dir: Path | None) -> LookupResult:
    name = key.file_name()
    searched = []
    if tuned_folder:
        searched.append(os.path.join(tuned_folder, name))
    if package_dir is not None:
        searched.append(str(package_dir / name))
    for path in searched:
        if os.path.exists(path):
            try:
                body = json.loads(Path(path).read_text())
            except (OSError, json.JSONDecodeError) as exc:
                return LookupResult(name, searched, path, None, [f"vLLM would crash reading {path}: {exc}"])
            problems = validate_config_body(body)
            if problems:
                return LookupResult(name, searched, path, None, problems)
            body.pop("triton_version", None)
            return LookupResult(name, searched, path, {int(k): v for k, v in body.items()})
    return LookupResult(name, searched, None, None)


def closest_batch_size(configs: dict[int, Any], m: int) -> int:
    """The grid entry vLLM uses for M tokens: the key nearest to M (ties -> the first in file order)."""
    return min(configs, key=lambda size: abs(size - m))


_PROBE = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
name, E, N, dtype, bn, bk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] or None, int(sys.argv[5]), \\
    int(sys.argv[6])
from vllm.platforms import current_platform
import vllm.utils.platform_utils as pu
type(current_platform).get_device_name = classmethod(lambda cls, device_id=0: name)
pu.get_device_name_as_file_name.cache_clear()
from vllm.model_executor.layers.fused_moe import fused_moe as fm
block = [bn, bk] if bn and bk else None
got = fm.get_moe_configs(E, N, dtype, bn or None, bk or None)
print("MOE_PROBE " + json.dumps({"file_name": fm.get_config_file_name(E, N, dtype, block),
                                  "batch_sizes": sorted(got) if got else None}), flush=True)
"""


@dataclass
class RealLookup:
    file_name: str
    batch_sizes: list[int] | None
    loaded_from: str | None
    log_lines: list[str]


def lookup_with_real_vllm(python: str, key: ConfigKey, *, gpu_full_name: str, tuned_folder: str | None,
                          timeout_s: float = 240) -> RealLookup:
    """Run vLLM's own ``get_moe_configs`` in ``python`` (an env with vLLM) as if on ``gpu_full_name``."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_TUNED_CONFIG_FOLDER"}
    env.update({"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"})
    if tuned_folder:
        env["VLLM_TUNED_CONFIG_FOLDER"] = tuned_folder
    bn, bk = key.block_shape or (0, 0)
    cmd = [python, "-c", _PROBE, gpu_full_name, str(key.E), str(key.N), key.dtype or "", str(bn), str(bk)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInputError(f"cannot run vLLM's lookup in {python}: {exc}") from exc
    lines = (done.stdout + "\n" + done.stderr).splitlines()
    probe = [ln for ln in lines if ln.startswith("MOE_PROBE ")]
    if done.returncode != 0 or not probe:
        tail = lines[-1] if lines else ""
        raise BadInputError(f"vLLM's lookup failed in {python} (exit {done.returncode}): {tail}")
    body = json.loads(probe[-1].removeprefix("MOE_PROBE "))
    findings = read_moe_log("\n".join(lines))
    found = [e.paths[0] for e in findings.events if e.kind == "found"]
    moe_lines = [ln for ln in lines if "MoE config" in ln or "for MoE layer" in ln]
    return RealLookup(body["file_name"], body["batch_sizes"], found[0] if found else None, moe_lines)


# ---- end-to-end A/B ---------------------------------------------------------------------------------------------

_AB_METRICS = (("output_throughput", "tok/s", True), ("mean_tpot_ms", "ms", False), ("mean_ttft_ms", "ms", False))


class AbMetric(BaseModel):
    """One metric of an A/B comparison of saved benchmark results (baseline vs tuned MoE configs)."""

    metric: str
    unit: str
    baseline: float
    tuned: float
    change_pct: float
    noise_pct: float | None
    verdict: str


def _load(path: str) -> dict[str, Any]:
    raw = read_bytes(path, limit=_MAX_RESULT_BYTES, what="benchmark result")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadInputError(f"benchmark result {path} is not valid JSON") from None
    if not isinstance(data, dict) or "output_throughput" not in data:
        raise BadInputError(f"{path} is not a run_benchmark / vllm bench serve result (no output_throughput)")
    return data


def compare_ab(baseline: list[str], tuned: list[str]) -> list[AbMetric]:
    """Per metric: relative change tuned vs baseline and the noise it must beat.

    Noise: with two or more runs per side, the run-to-run spread (2 x the larger standard error of the mean);
    with one run per side, for the latency means only, 2 x the per-request standard error (std / sqrt(completed));
    throughput from single runs has no noise estimate and is reported as such."""
    if not baseline or not tuned:
        raise BadInputError("A/B comparison needs at least one baseline and one tuned result file")
    base = [_load(p) for p in baseline]
    new = [_load(p) for p in tuned]
    out = []
    for metric, unit, higher_better in _AB_METRICS:
        b_vals = [float(r[metric]) for r in base if r.get(metric) is not None]
        t_vals = [float(r[metric]) for r in new if r.get(metric) is not None]
        if not b_vals or not t_vals:
            continue
        b, t = statistics.fmean(b_vals), statistics.fmean(t_vals)
        if b == 0:
            continue
        change = (t - b) / b * 100
        noise = _noise_pct(metric, b, base, new, b_vals, t_vals)
        better = change > 0 if higher_better else change < 0
        if noise is None:
            verdict = "no noise estimate: repeat each side at least twice"
        elif abs(change) <= noise:
            verdict = "within noise"
        else:
            verdict = "better" if better else "worse"
        out.append(AbMetric(metric=metric, unit=unit, baseline=round(b, 3), tuned=round(t, 3),
                            change_pct=round(change, 2), noise_pct=None if noise is None else round(noise, 2),
                            verdict=verdict))
    return out


def _noise_pct(metric: str, b: float, base: list[dict[str, Any]], new: list[dict[str, Any]], b_vals: list[float],
               t_vals: list[float]) -> float | None:
    if len(b_vals) >= 2 and len(t_vals) >= 2:
        se = max(statistics.stdev(b_vals) / math.sqrt(len(b_vals)), statistics.stdev(t_vals) / math.sqrt(len(t_vals)))
        return 2 * se / b * 100
    std_key = metric.replace("mean_", "std_")
    if metric.startswith("mean_") and all(std_key in r and r.get("completed") for r in base + new):
        se = max(float(r[std_key]) / math.sqrt(float(r["completed"])) for r in base + new)
        return 2 * se / b * 100
    return None
