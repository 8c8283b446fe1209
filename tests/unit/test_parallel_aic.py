"""AIConfigurator beside our estimate (plan --estimator), where it covers the model and GPU."""

from __future__ import annotations

import sys

import pytest

from vllm_tune.tools.parallel import PlanInput, recommend_parallelism


def test_builtin_never_imports_aiconfigurator() -> None:
    recommend_parallelism(PlanInput(model="llama-3.1-8b", gpu="H100", gpus=2, offline=True))
    assert not any(name.startswith("aiconfigurator") for name in sys.modules)


def test_aic_estimate_beside_ours_where_covered() -> None:
    pytest.importorskip("aiconfigurator")
    out = recommend_parallelism(PlanInput(model="llama-3.1-8b", gpu="H100", gpus=2, concurrency=16, isl=512,
                                          osl=128, offline=True, estimator="both", top=2))
    for cand in out.candidates:
        pe = cand.peer_estimate
        assert pe is not None and pe.estimator.startswith("aiconfigurator")
        assert pe.output_tokens_per_s_per_gpu and pe.output_tokens_per_s_per_gpu > 0 and pe.tpot_ms
        assert "h100_sxm" in (pe.note or "")
        assert cand.estimate is not None  # ours stays beside it
    amd = recommend_parallelism(PlanInput(model="llama-3.1-8b", gpu="MI300X", gpus=1, offline=True,
                                          estimator="aic"))
    assert amd.candidates[0].peer_estimate is None
    assert any("no kernel database for MI300X" in w for w in amd.warnings)
