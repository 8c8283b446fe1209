"""what_if: predict what a flag or load change does to TTFT/ITL/throughput, before restarting anything.

One input model and one output model shared by the CLI, `--json` and the MCP schema. A prediction
needs a calibration of the server's step times: a saved one, one fitted on saved run_benchmark
results (sends nothing), or a short probe of the live server (sends load: loopback or allowlisted
targets only, and confirmed like run_benchmark). Each variant changes scheduler settings and/or the
load; all are simulated with the same calibration and compared with the unchanged baseline.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vllm_tune.tools.bench.api import MAX_REQUESTS, BenchResult, RunBenchmarkInput, check_target
from vllm_tune.tools.bench.capacity import CapacityResult, SearchVariable, search_capacity
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.slo import GoodputSlo, check_search_slo
from vllm_tune.tools.whatif import calibrate as cal_mod
from vllm_tune.tools.whatif import heldout
from vllm_tune.tools.whatif.calibrate import Calibration, Residual
from vllm_tune.tools.whatif.results import load_from_request, summarize
from vllm_tune.tools.whatif.simulate import EngineConfig, EstimateKind, run

ENGINE_KEYS = {"max_num_seqs": int, "max_num_batched_tokens": int, "num_gpu_blocks": int, "block_size": int,
               "long_prefill_token_threshold": int, "watermark": float, "max_model_len": int,
               "enable_chunked_prefill": bool, "scheduler_reserve_full_isl": bool}
LOAD_KEYS = {"rate": float, "concurrency": int, "max_concurrency": int, "burstiness": float, "num_prompts": int,
             "input_len": int, "output_len": int, "duration_s": float}
_ALIASES = {"num_gpu_blocks_override": "num_gpu_blocks", "request_rate": "rate", "max_concurrent": "max_concurrency"}


class WhatIfInput(BaseModel):
    """Where the calibration comes from, the load to predict for, and the variants to compare."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, description="live vLLM server to probe (with probe=true)")
    from_result: list[str] = Field(default=[], description="saved run_benchmark results (result.json or run dir) "
                                                           "to calibrate on; nothing is sent")
    calibration: str | None = Field(default=None, description="a saved what_if calibration JSON")
    probe: bool = Field(default=False, description="calibrate by a short probe load on url (~290 "
                                                   "requests at concurrency 4-32; once more if the host's speed "
                                                   "moved under it): SENDS LOAD")
    metrics_window_s: float | None = Field(default=None, ge=8, le=600,
                                           description="calibrate passively from url's /metrics over this many "
                                                       "seconds of its own traffic (GET only, sends no load)")
    confirm: bool = Field(default=False, description="must be true to probe a non-loopback target")
    serve_flags: dict[str, str] = Field(default={}, description="the server's current scheduler flags, e.g. "
                                                                "{'max_num_seqs': '256'} (vLLM does not export them)")
    variants: list[dict[str, str | int | float | bool]] = Field(
        default=[], description="changes to simulate, e.g. [{'max_num_batched_tokens': '8192'}, {'rate': '20'}]; "
                                "keys: scheduler flags and load fields")
    # The load, as run_benchmark takes it; default: the load of the first from_result.
    concurrency: int | None = Field(default=None, ge=1, le=65_536, description="closed-loop requests in flight")
    rate: float | None = Field(default=None, gt=0, le=1_000_000, description="open-loop requests/s")
    arrival: Literal["poisson", "constant", "gamma"] = Field(default="poisson", description="arrivals for rate")
    burstiness: float = Field(default=1.0, gt=0, le=100, description="gamma shape: 1 = Poisson")
    max_concurrency: int | None = Field(default=None, ge=1, description="cap on requests in flight")
    trace: str | None = Field(default=None, description="JSONL trace to replay (as run_benchmark)")
    num_prompts: int | None = Field(default=None, ge=1, le=MAX_REQUESTS, description="simulated requests")
    duration_s: float | None = Field(default=None, gt=0, le=1_800, description="seconds of load instead")
    input_len: int | None = Field(default=None, ge=1, le=1_000_000, description="prompt tokens")
    output_len: int | None = Field(default=None, ge=1, le=1_000_000, description="output tokens")
    seed: int = Field(default=0, description="arrivals seed")
    slo: GoodputSlo = Field(default={}, description="SLO in ms (ttft, tpot, e2el) for goodput")
    percentiles: list[float] = Field(default=[50.0, 90.0, 99.0], description="percentiles reported")
    search_capacity: bool = Field(default=False, description="also predict the SLO capacity of each variant")
    search_variable: SearchVariable = Field(default="rate", description="what the search raises")
    slo_percentile: float = Field(default=99.0, gt=0, lt=100, description="percentile the SLO is judged at")
    save_calibration: str | None = Field(default=None, description="write the calibration JSON here")

    @model_validator(mode="after")
    def _consistent(self) -> WhatIfInput:
        sources = sum([bool(self.calibration), bool(self.from_result), self.probe, self.metrics_window_s is not None])
        if sources == 0:
            raise ValueError("give a calibration: calibration=FILE, from_result=[RESULT...], probe=true with url, "
                             "or metrics_window_s with url")
        if sources > 1:
            raise ValueError("give one calibration source: calibration, from_result, probe or metrics_window_s")
        if (self.probe or self.metrics_window_s is not None) and not self.url:
            raise ValueError("probe and metrics_window_s need url")
        if sum(x is not None for x in (self.concurrency, self.rate, self.trace)) > 1:
            raise ValueError("choose one load shape: concurrency, rate or trace")
        check_search_slo(self.slo, self.search_capacity)
        return self


class Prediction(BaseModel):
    name: str
    changes: dict[str, str] = Field(default_factory=dict)
    engine: EngineConfig
    load: dict[str, Any] = Field(description="the load simulated")
    result: BenchResult = Field(description="simulated run in run_benchmark's result shape (simulated=true)")
    capacity: CapacityResult | None = None
    kind: EstimateKind = Field(
        default="estimate", description="'best case': throughput at most, latencies at least what is predicted "
                                        "(the calibration cannot estimate this batch size or prompt length; see "
                                        "warnings); 'worst case' the reverse; 'no bound': neither")
    warnings: list[str] = Field(default_factory=list)


class WhatIfOutput(BaseModel):
    calibration: Calibration
    baseline: Prediction
    variants: list[Prediction] = Field(default_factory=list)
    table: list[dict[str, Any]] = Field(default_factory=list, description="one row per prediction")
    calibration_path: str | None = None
    notes: list[str] = Field(default_factory=list)


def parse_changes(changes: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a variant into engine and load updates, typed; unknown keys are one clear error."""
    engine: dict[str, Any] = {}
    load: dict[str, Any] = {}
    for raw_key, raw in changes.items():
        key = raw_key.strip().lstrip("-").replace("-", "_")
        key = _ALIASES.get(key, key)
        kind = ENGINE_KEYS.get(key) or LOAD_KEYS.get(key)
        if kind is None:
            raise BadInputError(f"unknown setting {raw_key!r}; what_if models: {', '.join([*ENGINE_KEYS, *LOAD_KEYS])}")
        try:
            value: Any = (str(raw).lower() in ("1", "true", "yes", "on")) if kind is bool else kind(raw)
        except ValueError:
            raise BadInputError(f"{raw_key}={raw!r}: expected a {kind.__name__}") from None
        (engine if key in ENGINE_KEYS else load)[key] = value
    return engine, load


def _base_request(req: WhatIfInput, first_result: dict[str, Any] | None) -> RunBenchmarkInput:
    fields: dict[str, Any] = {"url": req.url or "http://127.0.0.1:1", "arrival": req.arrival,
                              "burstiness": req.burstiness, "seed": req.seed}
    if first_result is not None and req.concurrency is None and req.rate is None and req.trace is None:
        prov = first_result.get("provenance") or {}
        load, work = prov.get("load") or {}, prov.get("workload") or {}
        if load.get("concurrency"):
            fields["concurrency"] = int(load["concurrency"])
        elif load.get("rate"):
            fields["rate"] = float(load["rate"])
            fields["max_concurrency"] = load.get("max_concurrency")
        fields["num_prompts"] = int(first_result.get("num_prompts") or 0) or None
        fields["input_len"] = int(work.get("input_len") or 256)
        fields["output_len"] = int(work.get("output_len") or 128)
    for name in ("concurrency", "rate", "max_concurrency", "trace", "num_prompts", "duration_s", "input_len",
                 "output_len"):
        value = getattr(req, name)
        if value is not None:
            fields[name] = value
    if not any(fields.get(k) for k in ("concurrency", "rate", "trace")):
        raise BadInputError("what load? give concurrency, rate or trace (or from_result, whose load is reused)")
    return RunBenchmarkInput(**fields)


def _calibrate(req: WhatIfInput) -> tuple[Calibration, dict[str, Any] | None]:
    if req.calibration:
        return cal_mod.load_calibration(req.calibration), None
    if req.from_result:
        first = cal_mod.read_result(req.from_result[0])
        return cal_mod.calibrate_from_results(req.from_result, serve_flags=req.serve_flags or None), first
    raise AssertionError("probe calibrations are made by what_if() itself")


def bounded_by(cal: Calibration, load_req: RunBenchmarkInput, mean_batch: float | None) -> list[tuple[str, bool]]:
    """The sizes a prediction cannot estimate because every calibration run had the one size: ("batch" or
    "prompt", whether the prediction's is larger). A cost per sequence (or per prompt token) that no run could tell
    apart was folded into the fixed costs at that size; with the true cost >= 0, a larger size is predicted too
    fast (a best case) and a smaller one too slow (a worst case). `mean_batch`: the prediction's mean requests per
    engine step."""
    seen = cal.conditions.get("seen") or {}
    out: list[tuple[str, bool]] = []
    b0 = seen.get("single_batch")
    if b0 and mean_batch and not 0.8 * b0 <= mean_batch <= 1.25 * b0:
        out.append(("batch", mean_batch > b0))
    l0 = seen.get("single_input_len")
    if l0 and not 0.8 * l0 <= load_req.input_len <= 1.25 * l0:
        out.append(("prompt", load_req.input_len > l0))
    return out


def estimate_kind(bounds: list[tuple[str, bool]]) -> EstimateKind:
    """'estimate', 'best case' (throughput at most, latencies at least), 'worst case', or 'no bound' (the sizes
    pull opposite ways)."""
    sides = {larger for _, larger in bounds}
    if not sides:
        return "estimate"
    if len(sides) > 1:
        return "no bound"
    return "best case" if sides == {True} else "worst case"


def range_warnings(cal: Calibration, engine: EngineConfig, load_req: RunBenchmarkInput,
                   mean_batch: float | None = None, bounded: list[tuple[str, bool]] | None = None) -> list[str]:
    """Say when a prediction is only a bound (see bounded_by; `bounded`: its answer, when the caller has it) or
    leaves the batch sizes and prompt lengths the calibration saw."""
    seen = cal.conditions.get("seen") or {}
    out: list[str] = []
    bounds = dict(bounded if bounded is not None else bounded_by(cal, load_req, mean_batch))
    if "batch" in bounds:
        more = bounds["batch"]
        out.append(f"not enough data for an estimate: every calibration run kept {seen['single_batch']} requests "
                   f"in flight, so the cost of each sequence in a step is unknown (folded into the fixed cost); at "
                   f"about {mean_batch or 0:.0f} per step read throughput as at {'most' if more else 'least'} and "
                   f"latencies as at {'least' if more else 'most'} what is predicted (calibrate on runs at other "
                   f"concurrencies, or by probe, for an estimate)")
    if "prompt" in bounds:
        more = bounds["prompt"]
        out.append(f"not enough data for an estimate: every calibration prompt had {seen['single_input_len']} "
                   f"tokens, so the cost per prompt token is unknown (folded into the fixed costs); for "
                   f"{load_req.input_len}-token prompts read TTFT as at {'least' if more else 'most'} and throughput "
                   f"as at {'most' if more else 'least'} what is predicted (calibrate on runs with other prompt "
                   f"lengths, or by probe, for an estimate)")
    conc = load_req.concurrency or load_req.max_concurrency
    max_batch = seen.get("max_concurrency")
    # 1.25x: on the suite's CPU server the per-sequence cost already grew several-fold between concurrency 32
    # (the probe's largest) and 48, so even a modest step past the calibrated range is flagged.
    if "batch" not in bounds and max_batch and conc and min(conc, engine.max_num_seqs) > 1.25 * max_batch:
        # The API server's hand-off is fitted in proportion to the requests in flight, and it grows faster once the
        # API server cannot keep up: bench/bench_request_path.py --intake, later waves of a closed loop on the suite's
        # server, send to add_request 26-35 ms at 32 streams and 86-119 ms at 48 in the next run, minutes later.
        held = heldout.situation_note("concurrency")
        out.append(f"extrapolating: up to {min(conc, engine.max_num_seqs)} sequences per step, the calibration saw "
                   f"at most {max_batch}; TTFT is the least certain there (an API server that falls behind its "
                   f"streams takes new requests in more slowly than in proportion to them)"
                   + (f"; {held}" if held else ""))
    max_in = seen.get("max_input_len")
    if "prompt" not in bounds and max_in and load_req.input_len > 1.25 * max_in:
        # Attention makes each prompt token attend to those before it: on the suite's CPU server a lone prompt's
        # token from 512 to 1000 cost 1.3-1.6 times one from 64 to 512 (bench/bench_prefill_len.py, two runs), which
        # a cost per token fitted on shorter prompts under-counts (whatif.calibration-log).
        held = heldout.situation_note("longer prompts")
        out.append(f"extrapolating: {load_req.input_len}-token prompts, the calibration saw at most {max_in}; "
                   f"prefill grows faster than a prompt's length (attention), so the prefill cost fitted on shorter "
                   f"prompts is a low estimate for these" + (f"; {held}" if held else ""))
    return out


def chunking_warning(cal: Calibration, engine: EngineConfig, load_req: RunBenchmarkInput) -> str | None:
    """Say when every prompt of the prediction is prefilled in chunks while every calibration prompt fitted the
    calibration server's budget whole, with how such a prediction landed on real vLLM (heldout.situation_note).
    On the suite's CPU server a chunked closed loop staggers its requests; the simulator gives each a hand-off
    fitted on loops in lock-step and has it wait for one other prompt, so its TTFTs pile up at one value, above the
    server's median and below its 90th percentile (knowledge: whatif.simplifications)."""
    seen = cal.conditions.get("seen") or {}
    max_seen = seen.get("max_input_len")
    budget = engine.max_num_batched_tokens
    if not engine.enable_chunked_prefill or load_req.input_len <= budget or not max_seen:
        return None
    if max_seen > cal.engine.max_num_batched_tokens:
        return None  # the calibration's own prompts were chunked
    held = heldout.situation_note("chunked")
    return (f"every {load_req.input_len}-token prompt is prefilled in chunks (max_num_batched_tokens {budget}), "
            f"which no calibration run did (its prompts, up to {max_seen} tokens, fit "
            f"{cal.engine.max_num_batched_tokens} whole); TTFT is the least certain part"
            + (f": {held}" if held else ""))


def _predict(name: str, changes: dict[str, str], cal: Calibration, base_engine: EngineConfig,
             base_req: RunBenchmarkInput, req: WhatIfInput) -> Prediction:
    engine_upd, load_upd = parse_changes(changes)
    engine = base_engine.model_copy(update=engine_upd)
    engine = EngineConfig.model_validate(engine.model_dump())
    if "rate" in load_upd:
        load_upd.setdefault("concurrency", None)
    if load_upd.get("concurrency"):
        load_upd.setdefault("rate", None)
    load_req = RunBenchmarkInput.model_validate({**base_req.model_dump(), **load_upd})
    load = load_from_request(load_req)
    trace = run(engine, cal.step_model, load)
    result = summarize(trace, load, engine, cal.step_model, percentiles=req.percentiles, slo_ms=req.slo or None,
                       label=name)
    mean_batch = sum(trace.step_tokens) / len(trace.step_tokens) if trace.step_tokens else None
    bounds = bounded_by(cal, load_req, mean_batch)
    warnings = range_warnings(cal, engine, load_req, mean_batch, bounds)
    chunked = chunking_warning(cal, engine, load_req)
    if chunked:
        warnings.append(chunked)
    kind = estimate_kind(bounds)
    if result["failed"]:
        warnings.append(f"{result['failed']} requests were never sent or never finished in the simulation")
    load_view = {k: v for k, v in load_req.model_dump().items()
                 if k in ("concurrency", "rate", "arrival", "burstiness", "max_concurrency", "trace", "num_prompts",
                          "duration_s", "input_len", "output_len") and v is not None}
    return Prediction(name=name, changes=dict(changes), engine=engine, load=load_view,
                      result=BenchResult.model_validate(result), kind=kind, warnings=warnings)


async def simulate_capacity(engine: EngineConfig, cal: Calibration, base_req: RunBenchmarkInput, *,
                            slo: dict[str, float], pct: float, variable: SearchVariable, upper: float | None = None,
                            probe_concurrency: int | None = None, repeats: int = 1, num_prompts: int | None = None,
                            seed_per_step: bool = False, mean_batches: dict[float, float] | None = None
                            ) -> CapacityResult:
    """run_benchmark's capacity search with every step simulated instead of sent.

    With seed_per_step each step draws its own arrivals (seed + step), as the measured search does, so
    that repeats at the boundary differ the way repeated runs would. `mean_batches`, when given, gets each
    value's mean requests per engine step (its last simulation's), which range_warnings needs."""
    steps = 0

    async def measure(var: SearchVariable, value: float, phase: str) -> dict[str, Any]:
        nonlocal steps
        steps += 1
        rate = value if var == "rate" and phase != "probe" else None
        conc = int(value) if var == "concurrency" or phase == "probe" else None
        n = num_prompts or max(200, base_req.num_prompts or 0)
        load_req = RunBenchmarkInput.model_validate({**base_req.model_dump(), "rate": rate, "concurrency": conc,
                                                     "num_prompts": n,
                                                     "seed": base_req.seed + (steps if seed_per_step else 0)})
        load = load_from_request(load_req)
        trace = run(engine, cal.step_model, load)
        if mean_batches is not None and trace.step_tokens:
            mean_batches[value] = sum(trace.step_tokens) / len(trace.step_tokens)
        return summarize(trace, load, engine, cal.step_model, percentiles=[50.0, pct], slo_ms=slo)

    probe = probe_concurrency or max(1, min(engine.max_num_seqs, 1024))
    out = await search_capacity(measure, variable=variable, slo_ms=slo, pct=pct, upper=upper,
                                probe_concurrency=probe, repeats=repeats)
    out.simulated = True
    return out


async def _capacity(pred: Prediction, cal: Calibration, base_req: RunBenchmarkInput,
                    req: WhatIfInput) -> CapacityResult:
    return await simulate_capacity(pred.engine, cal, base_req.model_copy(update={"seed": req.seed}), slo=req.slo,
                                   pct=req.slo_percentile, variable=req.search_variable)


TABLE_METRICS = ("request_throughput", "output_throughput", "median_ttft_ms", "p90_ttft_ms", "median_itl_ms",
                 "p90_itl_ms", "median_tpot_ms", "request_goodput")


def table_row(p: Prediction) -> dict[str, Any]:
    res = p.result.model_dump()
    row: dict[str, Any] = {"variant": p.name, "kind": p.kind, "max_num_seqs": p.engine.max_num_seqs,
                           "max_num_batched_tokens": p.engine.max_num_batched_tokens,
                           "load": ", ".join(f"{k}={v}" for k, v in p.load.items()
                                             if k in ("concurrency", "rate", "input_len", "output_len"))}
    for m in TABLE_METRICS:
        row[m] = res.get(m)
    sim = res.get("simulation") or {}
    row["preemptions"] = sim.get("preemptions")
    row["max_waiting"] = sim.get("max_waiting")
    if p.capacity is not None:
        row["capacity"] = p.capacity.capacity
    return row


async def calibrate_for(req: WhatIfInput) -> tuple[Calibration, dict[str, Any] | None]:
    """The calibration req asks for (probe, metrics window, saved calibration or saved results), and the first
    saved result when there is one (its load is the default load)."""
    if req.probe:
        assert req.url is not None
        check_target(RunBenchmarkInput(url=req.url, concurrency=1, confirm=req.confirm))
        return await cal_mod.calibrate_by_probe(req.url, serve_flags=req.serve_flags or None,
                                                confirm=req.confirm), None
    if req.metrics_window_s is not None:
        assert req.url is not None
        from vllm_tune.tools.whatif.passive import calibrate_from_metrics

        return await calibrate_from_metrics(req.url, window_s=req.metrics_window_s,
                                            serve_flags=req.serve_flags or None), None
    return _calibrate(req)


def engine_for(cal: Calibration, serve_flags: dict[str, str]) -> EngineConfig:
    """The calibration's engine with the scheduler flags the caller says the server runs with."""
    upd, _ = parse_changes({k: v for k, v in serve_flags.items() if k.lstrip("-").replace("-", "_") in ENGINE_KEYS})
    return EngineConfig.model_validate({**cal.engine.model_dump(), **upd}) if upd else cal.engine


async def what_if(req: WhatIfInput) -> WhatIfOutput:
    """Calibrate (or load a calibration), then simulate the baseline and every variant."""
    cal, first = await calibrate_for(req)
    path = str(cal_mod.save(cal, req.save_calibration)) if req.save_calibration else None
    base_engine = engine_for(cal, req.serve_flags)
    base_req = _base_request(req, first)
    baseline = _predict("baseline", {}, cal, base_engine, base_req, req)
    variants = [_predict(_name(v), v, cal, base_engine, base_req, req)
                for v in ({k: str(x) for k, x in var.items()} for var in req.variants)]
    if req.search_capacity:
        for p in [baseline, *variants]:
            p.capacity = await _capacity(p, cal, base_req, req)
    notes = ["predictions come from a scheduler simulation calibrated on this server's step times; what it "
             "leaves out (prefix-cache hits, speculative decoding, async-scheduling overlap) is listed in "
             "kb://entries/whatif.simplifications"]
    held = heldout.note()
    if held:
        notes.append(held)
    notes.extend(cal.notes)
    if cal.max_abs_relative_error is not None and cal.max_abs_relative_error > 0.2:
        notes.append(f"the calibration reproduces its own runs only within {cal.max_abs_relative_error:.0%}; "
                     "treat small predicted differences as noise")
    unsupported = unsupported_metrics(cal)
    notes.extend(f"not enough data for {m}: the calibration puts it at {r.fitted:.3g} for run {r.run}, which "
                 f"measured {r.measured:.3g}; its predictions of {m} are not supported (calibrate on other runs or "
                 f"by probe)" for m, r in unsupported.items())
    # The table says "n/a" where the calibration cannot support a number (the simulated results keep them all).
    hidden = set(unsupported) | ({"output_throughput"} if "request_throughput" in unsupported else set())
    table = [{k: ("n/a" if k in hidden else v) for k, v in table_row(p).items()} for p in [baseline, *variants]]
    return WhatIfOutput(calibration=cal, baseline=baseline, variants=variants, table=table, calibration_path=path,
                        notes=notes)


UNSUPPORTED_ERROR = 1.0  # off by more than a factor of two on its own run


def unsupported_metrics(cal: Calibration) -> dict[str, Residual]:
    """The metrics the calibration misses on its own runs by more than UNSUPPORTED_ERROR, each with its worst
    residual: the simulation cannot reproduce what it was fitted on there (a run whose tokens reached the client
    in bursts, say), so its predictions of that metric are no estimate at all."""
    worst: dict[str, Residual] = {}
    for r in cal.residuals:
        if abs(r.relative_error) > UNSUPPORTED_ERROR and (
                r.metric not in worst or abs(r.relative_error) > abs(worst[r.metric].relative_error)):
            worst[r.metric] = r
    return worst


def _name(changes: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in changes.items()) or "baseline"


def predict_values(calibration: Calibration, changes: dict[str, str], *, load: dict[str, Any],
                   metric: str = "output_throughput") -> tuple[float, float]:
    """`metric` simulated for the unchanged server (calibration.engine) and with `changes` applied, same load."""
    b, c, _ = predict_with_kind(calibration, changes, load=load, metric=metric)
    return b, c


def predict_with_kind(calibration: Calibration, changes: dict[str, str], *, load: dict[str, Any],
                      metric: str = "output_throughput") -> tuple[float, float, EstimateKind]:
    """predict_values and the changed prediction's kind (Prediction.kind: an estimate or only a bound)."""
    req = WhatIfInput(calibration="-", **{k: v for k, v in load.items() if k in WhatIfInput.model_fields})
    base_req = _base_request(req, None)
    base = _predict("baseline", {}, calibration, calibration.engine, base_req, req)
    cand = _predict("candidate", changes, calibration, calibration.engine, base_req, req)
    b, c = base.result.model_dump().get(metric), cand.result.model_dump().get(metric)
    if b is None or c is None:
        raise BadInputError(f"metric {metric!r} is not in a simulated result")
    return float(b), float(c), cand.kind


def predict_gain(calibration: Calibration, changes: dict[str, str], *, load: dict[str, Any],
                 metric: str = "output_throughput") -> float:
    """Predicted relative change of `metric` when `changes` (scheduler flags and/or load) are applied.

    For the tuning loop: order candidate trials by this value. Positive means better (higher throughput,
    or lower latency for *_ms metrics). `load` holds run_benchmark load fields (concurrency or rate,
    input_len, output_len, num_prompts) and may hold percentiles and slo."""
    b, c = predict_values(calibration, changes, load=load, metric=metric)
    if not b:
        raise BadInputError(f"metric {metric!r} is 0 in the simulated baseline: no relative change")
    change = (c - b) / b
    return -change if metric.endswith("_ms") else change
