"""Server logs fuzzed from real vLLM logs: the diagnose and MoE log readers return facts or one BadInputError."""

from __future__ import annotations

import contextlib
from pathlib import Path

from fuzzing import FUZZ, mutated_lines
from hypothesis import given
from hypothesis import strategies as st

from vllm_tune.tools.diagnose.logs import parse_log
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.moe.logs import read_moe_log

ROOT = Path(__file__).parents[2]
LOGS = [p.read_text() for p in sorted((ROOT / "tests" / "data" / "captures").glob("*.log"))]
LOGS += [p.read_text() for p in sorted((ROOT / "knowledge" / "samples").glob("*/*.log"))]
MOE = ("INFO 12-04 10:00:00 [fused_moe.py:1] Using configuration from /opt/configs/E=256,N=256,"
       "device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json for MoE layer.\n"
       "WARNING 12-04 10:00:01 [fused_moe.py:2] Using default MoE config. Performance might be sub-optimal! "
       "Config file not found at /opt/configs/E=256,N=256,device_name=NVIDIA_H200.json\n"
       "(EngineCore_DP0 pid=4242) WARNING 12-04 10:00:02 [fused_moe.py:3] Using default MoE config. Performance "
       "might be sub-optimal! Config file not found at ['/a/E=8,N=14336,device_name=NVIDIA_H100.json', '/b/x.json']\n")


@FUZZ
@given(mutated_lines(LOGS))
def test_diagnose_log(text: str) -> None:
    try:
        parse_log(text)
    except BadInputError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(mutated_lines([MOE, *LOGS]))
def test_moe_log(text: str) -> None:
    try:
        read_moe_log(text)
    except BadInputError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(st.text(max_size=400))
def test_arbitrary_text(text: str) -> None:
    for reader in (parse_log, read_moe_log):
        with contextlib.suppress(BadInputError):
            reader(text)  # type: ignore[operator]
