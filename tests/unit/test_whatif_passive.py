"""Passive calibration from /metrics scrapes: recovers the step costs behind the counters, or says why not."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.whatif.passive import fit_window, parse_metrics

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "captures"
CACHE = 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="4096"} 1.0\n'


def _text(steps: float, prompt: float, gen: float, itl_sum: float, itl_count: float) -> str:
    return (CACHE + f'vllm:iteration_tokens_total_count{{engine="0"}} {steps}\n'
            f'vllm:prompt_tokens_total{{engine="0"}} {prompt}\nvllm:generation_tokens_total{{engine="0"}} {gen}\n'
            f'vllm:inter_token_latency_seconds_sum{{engine="0"}} {itl_sum}\n'
            f'vllm:inter_token_latency_seconds_count{{engine="0"}} {itl_count}\n')


def test_fit_recovers_step_costs_from_counter_deltas() -> None:
    fixed, per_seq, per_prompt = 0.004, 0.0003, 0.00002
    totals = [0.0] * 5
    points = [parse_metrics(_text(*totals), 0.0)]
    for i, (dec, pre) in enumerate([(4, 0), (16, 50), (32, 10), (8, 200), (24, 120), (12, 30)]):
        steps = 200.0
        step_s = fixed + per_seq * dec + per_prompt * pre
        totals = [totals[0] + steps, totals[1] + pre * steps, totals[2] + dec * steps,
                  totals[3] + step_s * dec * steps, totals[4] + dec * steps]
        points.append(parse_metrics(_text(*totals), float(i + 1)))
    cal = fit_window(points)
    assert cal.source == "metrics"
    assert cal.step_model.fixed_s == pytest.approx(fixed, rel=1e-6)
    assert cal.step_model.per_decode_seq_s == pytest.approx(per_seq, rel=1e-6)
    assert cal.step_model.per_prefill_token_s == pytest.approx(per_prompt, rel=1e-6)
    assert cal.engine.num_gpu_blocks == 4096 and cal.engine.block_size == 16
    assert cal.max_abs_relative_error is not None and cal.max_abs_relative_error < 1e-6


def test_idle_window_is_not_enough_data() -> None:
    idle = [parse_metrics(_text(10, 100, 100, 1.0, 100), float(t)) for t in range(8)]
    with pytest.raises(BadInputError, match="not enough data"):
        fit_window(idle)


def test_real_vllm_capture_pair_gives_step_and_token_deltas() -> None:
    before = parse_metrics((CAPTURES / "steady_light.before.prom").read_text(), 0.0)
    after = parse_metrics((CAPTURES / "steady_light.after.prom").read_text(), 30.0)
    for key in ("steps", "gen", "itl_count", "itl_sum"):
        assert after.values[key] > before.values[key], key
    assert int(after.cache_config["num_gpu_blocks"]) > 0 and int(after.cache_config["block_size"]) > 0
