"""Were two runs even comparable? Model, server, flags, workload, load shape, client health, sample size.

A difference in what was measured (lengths, dataset, endpoint, rate or concurrency) makes every verdict
`not-comparable`: a latency moved because the work changed, not the server. Differences that are
usually the change under test (server version, serve flags, model) are reported, and flagged when
several changed at once, since the verdict then cannot say which one mattered.
"""

from __future__ import annotations

import math
from typing import Any

from vllm_tune.tools.compare.load import LoadedRun
from vllm_tune.tools.compare.models import Check

AB = "benchmarking.ab-comparison"
WORKLOAD = "benchmarking.workload-first"
P99_COUNT = "benchmarking.prompt-count-for-p99"
NOISY = "benchmarking.noisy-neighbours"
CLIENT_LIMITED = "comparison.client-limited-run"
CAPACITY = "comparison.capacity-resolution"
TOK_VS_REQ = "benchmarking.tok-vs-req"
ERRORS = "triage.request-errors"
NO_WARMUP = "benchmarking.no-warmup"

LENGTH_TOLERANCE = 0.05  # mean tokens per request; exact-length runs agree far closer than this
STABLE_P99_REQUESTS = 200


def _same_number(a: Any, b: Any, rel: float = 0.01) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-9)
    return str(a) == str(b)


def _block(run: LoadedRun, key: str) -> dict[str, Any]:
    """A provenance block; a file where it is not a mapping has none."""
    value = run.provenance.get(key)
    return value if isinstance(value, dict) else {}


def _model(run: LoadedRun) -> str | None:
    value = run.provenance.get("model") or run.data.get("model_id")
    return str(value) if value else None


def _flags(run: LoadedRun) -> dict[str, str]:
    prov = run.provenance
    out: dict[str, str] = {}
    for block in ("serve_flags_from_metrics", "serve_flags_from_caller"):
        values = prov.get(block)
        if isinstance(values, dict):
            out.update({str(k): str(v) for k, v in values.items()})
    return out


def _mean_len(run: LoadedRun, key: str) -> float | None:
    total, done = run.data.get(key), run.completed
    if not isinstance(total, int | float) or done <= 0:
        return None
    return float(total) / done


def flag_diff(base: dict[str, str], cand: dict[str, str]) -> dict[str, list[str | None]]:
    """Flags recorded for both runs with different values. A flag recorded for one run only is unknown for the
    other (vllm bench serve's file records none), not a difference."""
    return {k: [base[k], cand[k]] for k in sorted(set(base) & set(cand)) if base[k] != cand[k]}


_CLIENT_NAMES = {"vllm-tune-benchmark": "vllm-tune", "vllm-tune-capacity": "vllm-tune",
                 "vllm-bench-serve": "vllm bench serve"}


def _client(base: LoadedRun, cand: LoadedRun) -> list[Check]:
    """Two load generators time, schedule and pace requests differently, and each can be starved of CPU in its
    own way: a difference between their runs may be the clients', so their numbers are not ranked."""
    a, b = _CLIENT_NAMES.get(base.format, base.format), _CLIENT_NAMES.get(cand.format, cand.format)
    if a == b:
        return []
    return [Check(id="client.different", severity="blocking", baseline=a, candidate=b, knowledge_ids=[AB, NOISY],
                  message=f"measured by different load generators ({a} vs {b}): client timing, pacing and CPU "
                          "starvation differ, so a gap may be the clients'; rerun both with the same client")]


def _changes(base: LoadedRun, cand: LoadedRun) -> list[Check]:
    """What changed on the server side: expected in an A/B, confounding when several change at once."""
    out: list[Check] = []
    changed: list[str] = []
    bm, cm = _model(base), _model(cand)
    if bm and cm and bm != cm:
        changed.append("model")
        out.append(Check(id="server.model", severity="caution", baseline=bm, candidate=cm, knowledge_ids=[AB],
                         message=f"different model ({bm} vs {cm}): meaningful only if the model is the change "
                                 "under test; token counts differ between tokenizers"))
    bv, cv = base.provenance.get("server_version"), cand.provenance.get("server_version")
    if bv and cv and bv != cv:
        changed.append("vLLM version")
        out.append(Check(id="server.version", severity="info", baseline=bv, candidate=cv, knowledge_ids=[AB],
                         message=f"vLLM version changed: {bv} -> {cv}"))
    elif not (bv and cv):
        out.append(Check(id="server.version", severity="info", baseline=bv, candidate=cv, knowledge_ids=[AB],
                         message="the server version is not recorded for every run, so an upgrade cannot be ruled "
                                 "in or out"))
    bf, cf = _flags(base), _flags(cand)
    diff = flag_diff(bf, cf)
    one_sided = sorted(set(bf) ^ set(cf))
    if one_sided:
        out.append(Check(id="server.flags-unknown", severity="info", knowledge_ids=[AB],
                         message=f"{len(one_sided)} serve flag(s) recorded for one run only, so not compared: "
                                 + ", ".join(one_sided[:6]) + (" ..." if len(one_sided) > 6 else "")))
    if diff:
        changed.append("serve flags")
        shown = ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in list(diff.items())[:8])
        out.append(Check(id="server.flags", severity="info", baseline={k: v[0] for k, v in diff.items()},
                         candidate={k: v[1] for k, v in diff.items()}, knowledge_ids=[AB],
                         message=f"serve flags differ: {shown}" + (" ..." if len(diff) > 8 else "")))
    if len(changed) > 1:
        out.append(Check(id="server.several-changes", severity="caution", knowledge_ids=[AB],
                         message=f"{' and '.join(changed)} changed together: a difference cannot be attributed "
                                 "to one of them"))
    bh, ch = base.provenance.get("client_host"), cand.provenance.get("client_host")
    if bh and ch and bh != ch:
        out.append(Check(id="client.host", severity="caution", baseline=bh, candidate=ch, knowledge_ids=[NOISY],
                         message="the load came from different client hosts: network path and client speed differ"))
    bu, cu = base.provenance.get("server_url"), cand.provenance.get("server_url")
    if bu and cu and bu != cu:
        out.append(Check(id="server.url", severity="info", baseline=bu, candidate=cu,
                         message=f"different server address ({bu} vs {cu})"))
    return out


def _workload(base: LoadedRun, cand: LoadedRun) -> list[Check]:
    out: list[Check] = []
    bb, cb = base.data.get("backend") or base.data.get("endpoint_type"), \
        cand.data.get("backend") or cand.data.get("endpoint_type")
    if bb and cb and bb != cb:
        out.append(Check(id="workload.endpoint", severity="blocking", baseline=bb, candidate=cb,
                         knowledge_ids=[WORKLOAD, AB],
                         message=f"different endpoint/backend ({bb} vs {cb}): chat templates change the prompt"))
    for key, what in (("total_input_tokens", "input"), ("total_output_tokens", "output")):
        a, b = _mean_len(base, key), _mean_len(cand, key)
        if a is not None and b is not None and not math.isclose(a, b, rel_tol=LENGTH_TOLERANCE, abs_tol=0.5):
            out.append(Check(id=f"workload.{what}_len", severity="blocking", baseline=round(a, 1),
                             candidate=round(b, 1), knowledge_ids=[WORKLOAD, TOK_VS_REQ, AB],
                             message=f"different {what} length: {a:.1f} vs {b:.1f} tokens per request; latencies "
                                     "and tokens/s move with length, so the runs measured different work"))
    bw, cw = _block(base, "workload"), _block(cand, "workload")
    for key in ("kind", "path", "input_len", "output_len", "prefix_len", "num_prefixes", "ignore_eos"):
        if key in bw and key in cw and bw[key] != cw[key]:
            if key in ("input_len", "output_len") and any(c.id == f"workload.{key}" for c in out):
                continue
            out.append(Check(id=f"workload.{key}", severity="blocking", baseline=bw[key], candidate=cw[key],
                             knowledge_ids=[WORKLOAD, AB], message=f"workload {key} differs: {bw[key]} vs {cw[key]}"))
    if "seed" in bw and "seed" in cw and bw["seed"] != cw["seed"]:
        out.append(Check(id="workload.seed", severity="caution", baseline=bw["seed"], candidate=cw["seed"],
                         knowledge_ids=[AB], message="different seeds: prompts (and arrival times) differ"))
    return out


def _load(base: LoadedRun, cand: LoadedRun) -> list[Check]:
    out: list[Check] = []
    for key, what in (("request_rate", "request rate"), ("max_concurrency", "concurrency cap"),
                      ("burstiness", "burstiness")):
        a, b = base.data.get(key), cand.data.get(key)
        if key in base.data and key in cand.data and not _same_number(a, b):
            out.append(Check(id=f"load.{key}", severity="blocking", baseline=a, candidate=b, knowledge_ids=[AB],
                             message=f"different {what}: {a} vs {b}; latency depends on the offered load"))
    bl, cl = _block(base, "load"), _block(cand, "load")
    for key in ("arrival", "concurrency", "duration_s"):
        if key in bl and key in cl and bl[key] != cl[key] and not any(c.id.startswith("load.") for c in out):
            out.append(Check(id=f"load.{key}", severity="blocking", baseline=bl[key], candidate=cl[key],
                             knowledge_ids=[AB], message=f"load {key} differs: {bl[key]} vs {cl[key]}"))
    bn, cn = base.data.get("num_prompts"), cand.data.get("num_prompts")
    if bn and cn and bn != cn:
        out.append(Check(id="load.num_prompts", severity="caution", baseline=bn, candidate=cn,
                         knowledge_ids=[AB, P99_COUNT],
                         message=f"different number of prompts ({bn} vs {cn}): tails are estimated from different "
                                 "sample sizes"))
    return out


def _health(run: LoadedRun, role: str) -> list[Check]:
    out: list[Check] = []
    check = run.data.get("client_check")
    if isinstance(check, dict):
        if check.get("client_limited"):
            listed = check.get("reasons")
            reasons = "; ".join(str(r) for r in listed if r) if isinstance(listed, list) else ""
            reasons = reasons or "flagged by the run"
            out.append(Check(id=f"client.limited.{role}", severity="blocking", knowledge_ids=[CLIENT_LIMITED],
                             message=f"the {role} run was limited by its client, not the server: {reasons}"))
        if check.get("stop_reason") == "cancelled":
            out.append(Check(id=f"run.cancelled.{role}", severity="caution", knowledge_ids=[AB],
                             message=f"the {role} run was cancelled; it covers only the requests that finished"))
        if check.get("warmup_requests") == 0:
            out.append(Check(id=f"run.no-warmup.{role}", severity="caution", knowledge_ids=[NO_WARMUP],
                             message=f"the {role} run sent no warm-up requests; its first requests may be cold"))
    if run.failed:
        total = run.completed + run.failed
        out.append(Check(id=f"requests.failed.{role}", severity="caution", knowledge_ids=[ERRORS],
                         message=f"{run.failed} of {total} requests failed in the {role} run; latencies describe "
                                 "only the requests that succeeded"))
    if 0 < run.completed < STABLE_P99_REQUESTS:
        out.append(Check(id=f"requests.few.{role}", severity="caution", knowledge_ids=[P99_COUNT],
                         message=f"only {run.completed} completed requests in the {role} run: p99 and higher "
                                 f"percentiles are unstable below about {STABLE_P99_REQUESTS}"))
    if run.completed == 0:
        out.append(Check(id=f"requests.none.{role}", severity="blocking", knowledge_ids=[ERRORS],
                         message=f"no request completed in the {role} run"))
    return out


def capacity_checks(base: LoadedRun, cand: LoadedRun) -> list[Check]:
    bc, cc = base.data["capacity"], cand.data["capacity"]
    out: list[Check] = []
    for key, what in (("variable", "searched variable"), ("slo_ms", "SLO"), ("slo_percentile", "SLO percentile")):
        if bc.get(key) != cc.get(key):
            out.append(Check(id=f"capacity.{key}", severity="blocking", baseline=bc.get(key), candidate=cc.get(key),
                             knowledge_ids=[CAPACITY, AB],
                             message=f"different {what}: {bc.get(key)} vs {cc.get(key)}; the capacities answer "
                                     "different questions"))
    out.append(Check(id="capacity.provenance", severity="info", knowledge_ids=[CAPACITY],
                     message="capacity results carry no provenance block: model, server version, flags and "
                             "workload could not be checked; make sure they match"))
    return out


def compare_checks(base: LoadedRun, cand: LoadedRun) -> list[Check]:
    if (base.format == "vllm-tune-capacity") != (cand.format == "vllm-tune-capacity"):
        return [Check(id="kind.capacity-vs-benchmark", severity="blocking", knowledge_ids=[CAPACITY, AB],
                      baseline=base.format, candidate=cand.format,
                      message="one run is a capacity search and the other a single load level: compare a "
                              "capacity search with another capacity search (capacity and knee)")]
    if base.format == "vllm-tune-capacity":
        return capacity_checks(base, cand)
    return [*_client(base, cand), *_workload(base, cand), *_load(base, cand), *_changes(base, cand),
            *_health(base, "baseline"), *_health(cand, "candidate")]
