"""The shared SLO vocabulary: both spellings, aliases, percentiles, and judging a bucketed percentile."""

from __future__ import annotations

import pytest

from vllm_tune.tools.diagnose.api import DiagnoseInput
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.slo import (
    SloTargets,
    judge_bounds,
    judge_value,
    parse_percentile,
    parse_slo,
    percentile_label,
    require_goodput_metrics,
)


def test_our_form_and_vllm_goodput_form_mean_the_same() -> None:
    ours = parse_slo("ttft=500,itl=15")
    assert ours.items() == {"ttft": 500.0, "itl": 15.0}
    assert parse_slo(["ttft:500", "tpot:50"]).items() == {"ttft": 500.0, "tpot": 50.0}
    assert parse_slo("ttft:500 e2el:2000").items() == parse_slo("ttft=500, e2el=2000ms").items()
    assert parse_slo("ttft_ms=500").items() == {"ttft": 500.0}
    assert parse_slo("").items() == {} and not parse_slo("").given()
    assert parse_slo("ttft=500,itl=15,tpot=40").as_goodput_args() == ["ttft:500", "tpot:40"]  # vLLM has no ITL goodput
    assert ours.describe() == "ttft=500,itl=15" and ours.as_dict() == {"ttft": 500.0, "itl": 15.0}


@pytest.mark.parametrize("text, fragment", [
    ("latency=3", "unknown SLO key 'latency'"),
    ("ttft=fast", "is not a number"),
    ("ttft=-5", "must be a positive number"),
    ("ttft", "expected METRIC=MS or METRIC:MS"),
    ("ttft=5,ttft:6", "given twice"),
])
def test_bad_slo_is_one_clear_line(text: str, fragment: str) -> None:
    with pytest.raises(BadInputError, match=fragment):
        parse_slo(text)


def test_goodput_keys_are_limited_where_vllm_limits_them() -> None:
    with pytest.raises(BadInputError, match="unknown SLO key 'itl'"):
        parse_slo("itl:5", allowed=("ttft", "tpot", "e2el"))
    with pytest.raises(BadInputError, match="ITL is not a per-request value"):
        require_goodput_metrics(parse_slo("itl=5"))


def test_percentiles() -> None:
    assert [parse_percentile(x) for x in ("p95", "95", "P99", 50, "99.9")] == [95.0, 95.0, 99.0, 50.0, 99.9]
    assert [percentile_label(x) for x in (90.0, 99.9)] == ["p90", "p99.9"]
    for bad in ("p100", "0", "fast"):
        with pytest.raises(BadInputError):
            parse_percentile(bad)


def test_mcp_input_takes_both_key_spellings_and_states_them_in_the_schema() -> None:
    a = DiagnoseInput.model_validate({"metrics": [{"text": "x"}], "slo": {"ttft": 500, "itl": 15}})
    b = DiagnoseInput.model_validate({"metrics": [{"text": "x"}], "slo": {"ttft_ms": 500, "itl_ms": 15}})
    assert a.slo == b.slo == SloTargets(ttft=500, itl=15)
    assert a.slo_percentile == 90
    schema = SloTargets.model_json_schema()
    assert set(schema["properties"]) == {"ttft", "itl", "tpot", "e2el"}
    with pytest.raises(ValueError):
        DiagnoseInput.model_validate({"metrics": [{"text": "x"}], "slo": {"latency": 5}})
    with pytest.raises(ValueError):
        DiagnoseInput.model_validate({"metrics": [{"text": "x"}], "slo_percentile": 97})


def test_judging_a_percentile_known_only_between_bucket_edges() -> None:
    # vLLM's TTFT bucket 250-500 ms against a 500 ms target: the edge is no margin, so undecided (issue 19)
    check = judge_bounds("ttft", 500, 90, lower_ms=250, upper_ms=500, observed_ms=490)
    assert check.status == "undecided" and "250-500 ms" in check.decided_by
    assert judge_bounds("ttft", 600, 90, lower_ms=250, upper_ms=500).status == "met"
    # a bucket above its lower edge is over a target at that edge
    assert judge_bounds("ttft", 500, 90, lower_ms=500, upper_ms=750).status == "violated"
    assert judge_bounds("ttft", 300, 90, lower_ms=250, upper_ms=500).status == "undecided"
    # first bucket (only "< 300 ms" known) and +Inf bucket (only "> 80 s" known)
    assert judge_bounds("e2el", 400, 90, lower_ms=0, upper_ms=300).status == "met"
    assert judge_bounds("e2el", 200, 90, lower_ms=0, upper_ms=300).status == "undecided"
    assert judge_bounds("itl", 200, 99, lower_ms=80_000, upper_ms=None).status == "violated"
    assert judge_bounds("itl", 90_000, 99, lower_ms=80_000, upper_ms=None).status == "undecided"
    assert judge_bounds("itl", 5, 99, lower_ms=None, upper_ms=None).status == "unknown"
    exact = judge_value("tpot", 50, 99, 50.0)
    assert exact.status == "met" and exact.percentile == 99
    assert judge_value("tpot", 50, 99, 50.1).status == "violated"
