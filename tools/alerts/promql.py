"""PromQL for the diagnose signals, over the version's metric names.

Each triage signal (tools/diagnose/signals.py SIGNAL_DOCS) is written as an expression aggregated `by` the
same labels (default job, instance, model_name), so conditions of one rule combine with `and` / `or` on equal
label sets. Aggregation follows what diagnose computes from scrapes: counters and histogram buckets are summed
over engines before ratios and quantiles (histogram_quantile over sum by (le, ...)); KV usage is the largest
engine's fraction; running per engine is the mean over engine series.

A signal returns None when it cannot be computed in PromQL for this target: a metric the version does not
export, a serve flag metrics do not carry (--max-num-seqs ...), or a value only the server log has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from vllm_tune.tools.alerts.names import MetricNames
from vllm_tune.tools.diagnose import names as diagnose_names


@dataclass(frozen=True)
class Targets:
    """Latency targets in ms the *_over_target signals divide the percentile (default p90) by."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    percentile: float = 90.0
    given: frozenset[str] = frozenset()  # the metrics whose target the operator stated (the rest are defaults)


@dataclass(frozen=True)
class Flags:
    """Serve flags that some signals need and /metrics does not export."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_cudagraph_capture_size: int | None = None


@dataclass
class PromQL:
    names: MetricNames
    selector: str = ""
    by: tuple[str, ...] = ("job", "instance", "model_name")
    range: str = "5m"
    targets: Targets = field(default_factory=Targets)
    flags: Flags = field(default_factory=Flags)

    # -- building blocks ------------------------------------------------------------------------------
    def name(self, wire: str) -> str:
        resolved = self.names.resolve(wire)
        if resolved is None:
            raise SignalUnavailable(f"vLLM {self.names.version} does not export {wire}")
        return resolved

    def sel(self, wire: str, extra: str = "", part: str = "") -> str:
        """`name{selector,extra}`; `part` (_bucket, _sum, _count) goes after the version's histogram name."""
        matchers = ",".join(m for m in (self.selector, extra) if m)
        return self.name(wire) + part + (f"{{{matchers}}}" if matchers else "")

    @property
    def by_clause(self) -> str:
        return ", ".join(self.by)

    def agg(self, op: str, inner: str) -> str:
        return f"{op} by ({self.by_clause}) ({inner})"

    def rate(self, wire: str, extra: str = "", part: str = "") -> str:
        return self.agg("sum", f"rate({self.sel(wire, extra, part)}[{self.range}])")

    def increase(self, wire: str, extra: str = "") -> str:
        return self.agg("sum", f"increase({self.sel(wire, extra)}[{self.range}])")

    def quantile(self, q: float, hist: str) -> str:
        inner = f"rate({self.sel(hist, part='_bucket')}[{self.range}])"
        return f"histogram_quantile({q:g}, sum by (le, {self.by_clause}) ({inner}))"

    def mean(self, hist: str) -> str:
        return f"({self.rate(hist, part='_sum')} / {self.rate(hist, part='_count')})"

    def over_time(self, op: str, fn: str, gauge: str, extra: str = "") -> str:
        return self.agg(op, f"{fn}({self.sel(gauge, extra)}[{self.range}])")

    # -- signals --------------------------------------------------------------------------------------
    def signal(self, name: str) -> str:
        """The PromQL of a signal; raises SignalUnavailable saying why it has none here."""
        build = _SIGNALS.get(name)
        if build is None:
            raise SignalUnavailable(_NO_PROMQL.get(name, f"{name} has no PromQL form here"))
        return build(self)


class SignalUnavailable(Exception):
    """A signal cannot be written in PromQL for this target; the message says why."""


def _ratio_to_target(key: str, hist: str) -> Callable[[PromQL], str]:
    def build(p: PromQL) -> str:
        target = getattr(p.targets, f"{key}_ms")
        if target is None:
            raise SignalUnavailable(f"no {key.upper()} target given")
        return f"({p.quantile(p.targets.percentile / 100.0, hist)} / {target / 1000.0:g})"
    return build


def _needs(flag: str) -> Callable[[PromQL], int]:
    def get(p: PromQL) -> int:
        value = getattr(p.flags, flag)
        if not value:
            raise SignalUnavailable(f"needs --{flag.replace('_', '-')} (metrics do not export it)")
        return int(value)
    return get


_max_num_seqs, _budget, _capture = _needs("max_num_seqs"), _needs("max_num_batched_tokens"), \
    _needs("max_cudagraph_capture_size")

_TTFT, _ITL = "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"
_TPOT, _E2EL = "vllm:request_time_per_output_token_seconds", "vllm:e2e_request_latency_seconds"
_QUEUE, _PROMPT = "vllm:request_queue_time_seconds", "vllm:request_prompt_tokens"
_RUNNING, _WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
_KV, _PREEMPT = "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"
_SUCCESS, _HITS, _QUERIES = "vllm:request_success_total", "vllm:prefix_cache_hits_total", \
    "vllm:prefix_cache_queries_total"
_HTTP = "http_requests_total"


def _names_regex(stems: list[str]) -> str:
    return "vllm:(" + "|".join(f"{s}(_total|_bucket|_sum|_count)?" for s in sorted(stems)) + ")"


def _name_count(stems: list[str]) -> Callable[[PromQL], str]:
    def build(p: PromQL) -> str:
        matchers = ",".join(m for m in (_label("__name__", "=~", _names_regex(stems)), p.selector) if m)
        return p.agg("count", f"{{{matchers}}}")
    return build


def _label(name: str, op: str, value: str) -> str:
    return f'{name}{op}"{value}"'


def _share(reason: str) -> Callable[[PromQL], str]:
    def build(p: PromQL) -> str:
        return f"({p.rate(_SUCCESS, _label('finished_reason', '=', reason))} / {p.rate(_SUCCESS)})"
    return build


def _prefix_enabled(p: PromQL) -> str:
    on = p.agg("max", p.sel("vllm:cache_config_info", 'enable_prefix_caching="True"'))
    off = p.agg("max", p.sel("vllm:cache_config_info", 'enable_prefix_caching="False"'))
    return f"({on} or ({off} * 0))"


def _hit_rate_drop(p: PromQL) -> str:
    window = f"({p.rate(_HITS)} / {p.rate(_QUERIES)})"
    lifetime = f"({p.agg('sum', p.sel(_HITS))} / {p.agg('sum', p.sel(_QUERIES))})"
    # diagnose judges the drop only over at least 1000 looked-up tokens; fewer say nothing about the shape
    return f"((1 - {window} / {lifetime}) and {p.increase(_QUERIES)} >= 1000)"


def _http_4xx(p: PromQL) -> str:
    # http_requests_total carries status classes ("2xx", "4xx") on vLLM 0.32; diagnose needs 10 responses
    share = f"({p.rate(_HTTP, _label('status', '=~', '4..'))} / {p.rate(_HTTP)})"
    return f"({share} and {p.increase(_HTTP)} >= 10)"


def _deferred_share(p: PromQL) -> str:
    deferred = p.over_time("sum", "avg_over_time", "vllm:num_requests_waiting_by_reason",
                           _label("reason", "=", "deferred"))
    return f"({deferred} / {p.over_time('sum', 'avg_over_time', _WAITING)})"


def _decode_over_target(p: PromQL) -> str:
    """As diagnose: the larger of TPOT and ITL over their targets, only those the SLO states when it states one."""
    ratios: dict[str, str] = {}
    reasons: list[str] = []
    for key, hist in (("tpot", _TPOT), ("itl", _ITL)):
        try:
            ratios[key] = _ratio_to_target(key, hist)(p)
        except SignalUnavailable as exc:
            reasons.append(str(exc))
    chosen = [ratios[k] for k in ratios if k in p.targets.given] or list(ratios.values())
    if not chosen:
        raise SignalUnavailable("; ".join(reasons))
    if len(chosen) == 1:
        return chosen[0]
    a, b = chosen
    return f"(({a} >= {b}) or {b})"  # element-wise max on equal label sets


def _queue_share_of_ttft(p: PromQL) -> str:
    """As diagnose: queue / (queue + prefill) time of the same finished requests; TTFT is recorded at the first
    token, queue and prefill at finish, so mixing them under a growing queue compares different requests."""
    try:
        prefill = p.rate("vllm:request_prefill_time_seconds", part="_sum")
    except SignalUnavailable:
        return f"clamp_max({p.mean(_QUEUE)} / {p.mean(_TTFT)}, 1)"
    queue = p.rate(_QUEUE, part="_sum")
    return f"({queue} / ({queue} + {prefill}))"


def _running_per_engine(p: PromQL) -> str:
    return p.over_time("avg", "avg_over_time", _RUNNING)


_SIGNALS: dict[str, Callable[[PromQL], str]] = {
    "ttft_p90_over_target": _ratio_to_target("ttft", _TTFT),
    "itl_p90_over_target": _ratio_to_target("itl", _ITL),
    "tpot_p90_over_target": _ratio_to_target("tpot", _TPOT),
    "e2el_p90_over_target": _ratio_to_target("e2el", _E2EL),
    # diagnose's current names (tools/diagnose/signals.py): the percentile is the SLO's, not always p90
    "ttft_over_target": _ratio_to_target("ttft", _TTFT),
    "itl_over_target": _ratio_to_target("itl", _ITL),
    "tpot_over_target": _ratio_to_target("tpot", _TPOT),
    "e2el_over_target": _ratio_to_target("e2el", _E2EL),
    "decode_over_target": lambda p: _decode_over_target(p),
    "queue_share_of_e2el": lambda p: f"clamp_max({p.mean(_QUEUE)} / {p.mean(_E2EL)}, 1)",
    "decode_share_of_e2el":
        lambda p: f"clamp_max({p.mean('vllm:request_decode_time_seconds')} / {p.mean(_E2EL)}, 1)",
    "itl_p99_over_p50": lambda p: f"({p.quantile(0.99, _ITL)} / {p.quantile(0.5, _ITL)})",
    "queue_time_share_of_ttft": lambda p: _queue_share_of_ttft(p),
    "waiting_mean": lambda p: p.over_time("sum", "avg_over_time", _WAITING),
    "running_mean": lambda p: p.over_time("sum", "avg_over_time", _RUNNING),
    "queue_growth_per_s": lambda p: p.over_time("sum", "deriv", _WAITING),
    "running_over_max_num_seqs": lambda p: f"({_running_per_engine(p)} / {_max_num_seqs(p)})",
    "server_utilisation": lambda p: f"({_running_per_engine(p)} / {_max_num_seqs(p)})",
    "running_max_over_max_num_seqs":
        lambda p: f"({p.over_time('max', 'max_over_time', _RUNNING)} / {_max_num_seqs(p)})",
    "running_max_over_capture": lambda p: f"({p.over_time('max', 'max_over_time', _RUNNING)} / {_capture(p)})",
    "preemptions_per_s": lambda p: p.rate(_PREEMPT),
    "preemptions_per_request": lambda p: f"({p.increase(_PREEMPT)} / {p.increase(_SUCCESS)})",
    "kv_usage_max": lambda p: p.over_time("max", "max_over_time", _KV),
    "kv_usage_mean": lambda p: p.over_time("avg", "avg_over_time", _KV),
    "prefill_steps_p90": lambda p: f"ceil({p.quantile(0.9, _PROMPT)} / {_budget(p)})",
    "iteration_tokens_p90_over_budget":
        lambda p: f"({p.quantile(0.9, 'vllm:iteration_tokens_total')} / {_budget(p)})",
    "prefix_caching_enabled": _prefix_enabled,
    "prefix_hit_rate": lambda p: f"({p.rate(_HITS)} / {p.rate(_QUERIES)})",
    "prefix_hit_rate_drop": _hit_rate_drop,
    "abort_fraction": _share("abort"),
    "error_fraction": _share("error"),
    "http_client_error_fraction": _http_4xx,
    "admission_rejections_per_s": lambda p: p.rate("vllm:admission_rejections_total"),
    "legacy_metric_names": _name_count(list(diagnose_names.RENAMED)),
    "v0_metric_names": _name_count(sorted(diagnose_names.V0_ONLY)),
    "deferred_share_of_waiting": _deferred_share,
    "finished_requests": lambda p: p.increase(_SUCCESS),
}

SIGNALS_IN_PROMQL = frozenset(_SIGNALS)
_NO_PROMQL = {
    "moe_default_config_warnings": "only the server log says that the default MoE config is in use",
    "kv_fit_over_max_num_seqs": "needs the KV-cache size, which vLLM exports only as a label of "
                                "vllm:cache_config_info that PromQL cannot read as a number",
    "window_seconds": "the length of a diagnose window, not a series",
}
