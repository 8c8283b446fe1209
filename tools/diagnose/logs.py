"""What a vLLM server log says about load and configuration, across the log formats vLLM has used.

Read (all optional, any order, several engines):
- periodic stats lines: V1 `Engine 000: ...` / `N Engines Aggregated: ...` with Running, Waiting, optional
  Deferred and Preemptions, `<DEV> KV cache usage` (GPU, or CPU on CPU builds), optional prefix hit rate; and
  the V0 form (`Running / Swapped / Pending`, where "CPU KV cache usage" is swap space, not the KV cache);
- start-up KV capacity: `<DEV> KV cache size: N tokens` with `Maximum concurrency ...` on the same line (v0.32+)
  or on the next one (older V1), V0's `# GPU blocks: N`;
- the `non-default args: {...}` line (max_num_seqs, max_num_batched_tokens, tensor_parallel_size...);
- the engine config line (version, prefix caching, CUDA-graph capture sizes);
- `Using default MoE config` warnings with the config file that was missing;
- access-log status codes (client errors).
Regular expressions are fine here: these are free-text log lines, not the metrics exposition format.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

_TS = re.compile(r"\b(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)\b")
_STATS = re.compile(
    r"(?:(?:Engine (?P<engine>\d+))|(?P<agg>\d+) Engines Aggregated)?:?\s*"
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, Avg generation throughput: (?P<gen>[\d.]+) tokens/s,"
    r"(?P<rest>.*)$"
)
_FIELD = {
    "running": re.compile(r"Running: (\d+) reqs"),
    "waiting": re.compile(r"Waiting: (\d+) reqs"),
    "pending": re.compile(r"Pending: (\d+) reqs"),
    "swapped": re.compile(r"Swapped: (\d+) reqs"),
    "deferred": re.compile(r"Deferred: (\d+) reqs"),
    "preemptions": re.compile(r"Preemptions: (\d+)"),
    "prefix_hit": re.compile(r"(?<!External )(?<!MM )Prefix cache hit rate: ([\d.]+)%"),
}
_KV_USAGE = re.compile(r"(?P<dev>[A-Z]+) KV cache usage: (?P<pct>[\d.]+)%")
_KV_SIZE = re.compile(r"(?P<dev>[A-Z]+) KV cache size: (?P<tokens>[\d,]+) tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.,]+)x")
_V0_BLOCKS = re.compile(r"# GPU blocks: (?P<gpu>\d+), # CPU blocks: (?P<cpu>\d+)")
_KV_MEM = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
_ARGS = re.compile(r"non-default args: (?P<args>\{.*\})\s*$")
_MOE_DEFAULT = re.compile(r"Using default MoE config\. Performance might be sub-optimal!"
                          r"(?:.*?not found at (?P<path>.+?\.json))?")
_MOE_FILE = re.compile(r"E=(?P<e>\d+),N=(?P<n>\d+),device_name=(?P<dev>[^,/]+?)(?:,dtype=(?P<dtype>[^,/]+?))?"
                       r"(?:,block_shape=\[(?P<bs>[\d, ]+)\])?\.json")
_VERSION = re.compile(r"(?:Initializing a V1 LLM engine \(v(?P<v1>[\w.+-]+)\)|\bversion (?P<v2>\d+\.\d+[\w.+-]*))")
_ENGINE_CFG = re.compile(r"Initializing a V1 LLM engine .*? with config: (?P<cfg>.*)$")
_CAPTURE = re.compile(r"'cudagraph_capture_sizes': \[(?P<sizes>[\d, ]*)\]")
_MAX_CAPTURE = re.compile(r"'max_cudagraph_capture_size': (?P<n>\d+|None)")
_PREFIX_CFG = re.compile(r"enable_prefix_caching=(?P<on>True|False)")
_TP_CFG = re.compile(r"tensor_parallel_size=(?P<tp>\d+)")
_ACCESS = re.compile(r'"(?:GET|POST|PUT|DELETE) (?P<path>\S+) HTTP/[\d.]+" (?P<code>\d{3})')
# Compilation or graph capture once the server serves: requests wait on one-time work (warm-up). Start-up
# lines before "Application startup complete" are normal and do not count.
_COMPILE = re.compile(r"torch\.compile takes [\d.]+ s|Compiling a graph for|Capturing CUDA graphs|"
                      r"[Cc]ompil(?:ing|ed) (?:a |the )?(?:kernel|graph)s?\b")
_ARG_PAIR = re.compile(r"'(?P<k>\w+)': (?P<v>-?\d+(?:\.\d+)?|True|False|None|'[^']*')")


@dataclass
class StatsLine:
    time: str | None
    engine: str  # "0", "1"... or "aggregated(N)"
    prompt_tps: float
    generation_tps: float
    running: int
    waiting: int
    deferred: int = 0
    preemptions: int = 0
    kv_usage: float | None = None  # fraction 0-1 of the KV cache (never V0 swap space)
    kv_device: str | None = None
    prefix_hit_rate: float | None = None
    v0_format: bool = False


@dataclass
class MoeWarning:
    path: str | None
    experts: int | None = None
    n: int | None = None
    device_name: str | None = None
    dtype: str | None = None
    block_shape: list[int] | None = None


@dataclass
class LogFacts:
    stats: list[StatsLine] = field(default_factory=list)
    kv_cache_tokens: int | None = None
    kv_device: str | None = None
    max_concurrency: float | None = None
    max_concurrency_len: int | None = None
    gpu_blocks: int | None = None
    kv_memory_gib: float | None = None
    serve_args: dict[str, Any] = field(default_factory=dict)
    version: str | None = None
    prefix_caching: bool | None = None
    tensor_parallel_size: int | None = None
    capture_sizes: list[int] | None = None
    max_capture_size: int | None = None
    moe_default_config: list[MoeWarning] = field(default_factory=list)
    http_status: dict[str, int] = field(default_factory=dict)  # "2xx" -> count
    lines: int = 0
    serving: bool = False  # the log reached "Application startup complete"
    compile_lines_while_serving: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.stats or self.kv_cache_tokens or self.serve_args or self.version or self.moe_default_config)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _parse_args(text: str) -> dict[str, Any]:
    try:
        value = ast.literal_eval(text)
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    # Non-literal values (config objects) break literal_eval: fall back to the simple key/value pairs.
    out: dict[str, Any] = {}
    for m in _ARG_PAIR.finditer(text):
        raw = m.group("v")
        out[m.group("k")] = raw.strip("'") if raw.startswith("'") else ast.literal_eval(raw)
    return out


def _stats(m: re.Match[str], line: str) -> StatsLine:
    rest = m.group("rest")
    stamp = _TS.search(line, 0, m.start("prompt"))
    found: dict[str, int | None] = {}
    for key, rx in _FIELD.items():
        hit_field = rx.search(rest) if key != "prefix_hit" else None
        found[key] = int(hit_field.group(1)) if hit_field else None
    v0 = found["pending"] is not None or found["swapped"] is not None
    kv_usage = kv_dev = None
    usages = {u.group("dev"): float(u.group("pct")) / 100 for u in _KV_USAGE.finditer(rest)}
    if v0:
        # V0 printed both: GPU = the KV cache, CPU = swap space.
        kv_usage, kv_dev = usages.get("GPU"), "GPU" if "GPU" in usages else None
    elif usages:
        kv_dev, kv_usage = next(iter(usages.items()))
    hit = _FIELD["prefix_hit"].search(rest)
    engine = f"aggregated({m.group('agg')})" if m.group("agg") else (str(int(m.group("engine")))
                                                                      if m.group("engine") else "0")
    return StatsLine(
        time=stamp.group("ts") if stamp else None, engine=engine, prompt_tps=float(m.group("prompt")),
        generation_tps=float(m.group("gen")),
        running=found["running"] or 0, waiting=(found["waiting"] if found["waiting"] is not None else
                                                found["pending"] or 0),
        deferred=found["deferred"] or 0, preemptions=found["preemptions"] or 0, kv_usage=kv_usage,
        kv_device=kv_dev, prefix_hit_rate=float(hit.group(1)) / 100 if hit else None, v0_format=v0,
    )


def _startup(line: str, facts: LogFacts) -> None:
    if (m := _KV_SIZE.search(line)) is not None:
        facts.kv_cache_tokens = _int(m.group("tokens"))  # per engine; DP engines log one line each
        facts.kv_device = m.group("dev")
    if (m := _MAX_CONC.search(line)) is not None:
        facts.max_concurrency = float(m.group("x").replace(",", ""))
        facts.max_concurrency_len = _int(m.group("len"))
    if (m := _V0_BLOCKS.search(line)) is not None:
        facts.gpu_blocks = int(m.group("gpu"))
    if (m := _KV_MEM.search(line)) is not None:
        facts.kv_memory_gib = float(m.group("gib"))


def _config(line: str, facts: LogFacts) -> None:
    if (m := _VERSION.search(line)) is not None and facts.version is None:
        facts.version = m.group("v1") or m.group("v2")
    if _ENGINE_CFG.search(line) is None:
        return
    if (m := _PREFIX_CFG.search(line)) is not None:
        facts.prefix_caching = m.group("on") == "True"
    if (m := _TP_CFG.search(line)) is not None:
        facts.tensor_parallel_size = int(m.group("tp"))
    if (m := _CAPTURE.search(line)) is not None:
        facts.capture_sizes = [int(x) for x in m.group("sizes").replace(" ", "").split(",") if x]
    if (m := _MAX_CAPTURE.search(line)) is not None and m.group("n") != "None":
        facts.max_capture_size = int(m.group("n"))


def _moe(m: re.Match[str]) -> MoeWarning:
    path = m.group("path")
    warning = MoeWarning(path=path)
    if path and (f := _MOE_FILE.search(path)) is not None:
        warning.experts, warning.n = int(f.group("e")), int(f.group("n"))
        warning.device_name, warning.dtype = f.group("dev"), f.group("dtype")
        if f.group("bs"):
            warning.block_shape = [int(x) for x in f.group("bs").split(",")]
    return warning


def parse_log(text: str) -> LogFacts:
    facts = LogFacts()
    for line in text.splitlines():
        facts.lines += 1
        if not facts.serving and "Application startup complete" in line:
            facts.serving = True
        elif facts.serving and _COMPILE.search(line) is not None and len(facts.compile_lines_while_serving) < 5:
            facts.compile_lines_while_serving.append(line.strip()[:200])
        if "throughput:" in line and (m := _STATS.search(line)) is not None:
            facts.stats.append(_stats(m, line))
            continue
        if "KV cache" in line or "Maximum concurrency" in line or "# GPU blocks" in line:
            _startup(line, facts)
        if "non-default args" in line and (m := _ARGS.search(line)) is not None:
            facts.serve_args = _parse_args(m.group("args"))
        if "version" in line or "Initializing a V1 LLM engine" in line:
            _config(line, facts)
        if "default MoE config" in line and (m := _MOE_DEFAULT.search(line)) is not None:
            facts.moe_default_config.append(_moe(m))
        if "HTTP/" in line and (m := _ACCESS.search(line)) is not None:
            key = m.group("code")[0] + "xx"
            facts.http_status[key] = facts.http_status.get(key, 0) + 1
    return facts


def stats_seconds(facts: LogFacts, default_interval_s: float = 10.0) -> float | None:
    """Seconds covered by the stats lines of one engine (timestamps, else lines x the default interval)."""
    lines = [s for s in facts.stats if s.engine in ("0", facts.stats[0].engine)] if facts.stats else []
    if not lines:
        return None
    times = [_seconds_of(s.time) for s in lines if s.time]
    if len(times) >= 2 and None not in times:
        span = max(t for t in times if t is not None) - min(t for t in times if t is not None)
        if span > 0:
            return span + span / (len(times) - 1)  # each line covers the interval before it
    return default_interval_s * len(lines)


def _seconds_of(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        date, clock = stamp.split(" ")
        month, day = (int(x) for x in date.split("-"))
        h, mi, s = (int(x) for x in clock.split(":"))
    except ValueError:
        return None
    return (((month * 31 + day) * 24 + h) * 60 + mi) * 60 + s
