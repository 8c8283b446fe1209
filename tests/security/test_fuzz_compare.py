"""compare_runs fuzzed: real result files with fields replaced by any JSON value (Infinity and NaN included), and
arbitrary JSON; the answer is a comparison or one BadInputError, never another exception."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from fuzzing import FUZZ_SLOW
from hypothesis import given
from hypothesis import strategies as st

from vllm_tune.tools.compare.api import CompareInput, compare_runs
from vllm_tune.tools.errors import BadInputError

SAMPLE = json.loads((Path(__file__).parents[1] / "unit" / "data" / "vllm_bench_serve_0.32_result.json").read_text())
SAMPLE["provenance"] = {"model": "tiny-llama", "server_version": "0.32.0", "workload": {"kind": "random"},
                        "load": {"concurrency": 4}, "serve_flags_from_caller": {}}
SAMPLE["client_check"] = {"client_limited": False, "reasons": [], "warmup_requests": 1}
KEYS = [*sorted(SAMPLE), "capacity", "vllm_tune", "requests_per_second", "errors", "ttfts", "output_lens", "itls"]
JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=10)


def _compare(tmp: Path, a: dict[str, Any], b: dict[str, Any]) -> None:
    (tmp / "a.json").write_text(json.dumps(a))
    (tmp / "b.json").write_text(json.dumps(b))
    try:
        out = compare_runs(CompareInput(runs=[str(tmp / "a.json"), str(tmp / "b.json")], resamples=200))
    except BadInputError as exc:
        assert "\n" not in str(exc)
        return
    for pair in out.comparisons:
        for m in pair.metrics:
            # a number that is not finite never carries a verdict
            if any(v is not None and not math.isfinite(v) for v in (m.baseline, m.candidate)):
                raise AssertionError(f"{m.key} compared a non-finite value")
            if m.verdict in ("better", "worse", "within-noise"):
                assert m.baseline is not None and m.candidate is not None


@FUZZ_SLOW
@given(st.dictionaries(st.sampled_from(KEYS), JSON, max_size=4), st.dictionaries(st.sampled_from(KEYS), JSON,
                                                                                  max_size=4))
def test_fields_replaced(tmp_path_factory: Any, a_changes: dict[str, Any], b_changes: dict[str, Any]) -> None:
    tmp = tmp_path_factory.mktemp("cmp")
    _compare(tmp, {**SAMPLE, **a_changes}, {**SAMPLE, **b_changes})


@FUZZ_SLOW
@given(st.sampled_from([k for k in SAMPLE if k.endswith("_ms") or k in ("completed", "failed", "duration")]),
       st.sampled_from([float("inf"), float("-inf"), float("nan"), -1.0, 0.0, 1e308]))
def test_special_numbers(tmp_path_factory: Any, key: str, value: float) -> None:
    tmp = tmp_path_factory.mktemp("cmp")
    _compare(tmp, SAMPLE, {**SAMPLE, key: value})


@FUZZ_SLOW
@given(JSON)
def test_arbitrary_json(tmp_path_factory: Any, doc: Any) -> None:
    tmp = tmp_path_factory.mktemp("cmp")
    (tmp / "a.json").write_text(json.dumps(doc))
    with contextlib.suppress(BadInputError):
        compare_runs(CompareInput(runs=[str(tmp / "a.json"), str(tmp / "a.json")]))
