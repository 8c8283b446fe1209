"""`vllm-tune demo`: what the tool does, offline, on embedded defaults (a real capture and the catalogs)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

# The demo's own scenario: one recorded overload, one dense and one MoE deployment question.
PLAN_MODEL, PLAN_GPU, PLAN_GPUS = "meta-llama/Llama-3.1-70B-Instruct", "H100", 8
MOE_MODEL, MOE_GPU, MOE_TP = "mistralai/Mixtral-8x7B-Instruct-v0.1", "B200", 2


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="show what vllm-tune does, offline, on embedded data",
                       description="Runs the knowledge search, diagnose_metrics on a real recorded overload of a "
                                   "vLLM 0.32.0 server, recommend_parallelism and tune_moe (check) on catalog "
                                   "models. Needs no network, GPU or vLLM.")
    p.add_argument("--json", action="store_true", help="print each step's output model as JSON")
    p.set_defaults(handler=_demo)


def _section(title: str) -> None:
    print(f"\n== {title}")


def _knowledge(as_json: bool) -> dict[str, Any]:
    from vllm_tune.tools.kb import load_knowledge
    from vllm_tune.tools.kb.api import KnowledgeSearchInput, search_knowledge

    kb = load_knowledge()
    entries = list(kb)
    hits = search_knowledge(KnowledgeSearchInput(query="TTFT high waiting queue growing", limit=3))
    if not as_json:
        kinds = Counter(e.kind for e in entries)
        evidence = Counter(e.evidence for e in entries)
        _section(f"Knowledge base: {len(entries)} cited entries")
        print("  kinds: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
        print("  evidence: " + ", ".join(f"{k} {n}" for k, n in evidence.most_common()))
        print('  search "TTFT high waiting queue growing":')
        for hit in hits.hits:
            print(f"    {hit.id}  {hit.title}")
    return {"entries": len(entries), "search": hits.model_dump(mode="json")}


def _diagnose(as_json: bool) -> dict[str, Any]:
    from vllm_tune.knowledge import SAMPLES_DIR
    from vllm_tune.tools.diagnose.api import diagnose_texts
    from vllm_tune.tools.diagnose.models import ServeFlags
    from vllm_tune.tools.diagnose.report import render_report

    sample = SAMPLES_DIR / "overload"
    meta = json.loads((sample / "capture.json").read_text())
    out = diagnose_texts([("overload/before.prom", (sample / "before.prom").read_text()),
                          ("overload/after.prom", (sample / "after.prom").read_text())],
                         window_s=float(meta["window_s"]), log_text=(sample / "server.log").read_text(),
                         serve_flags=ServeFlags())
    if not as_json:
        load = meta["load"]
        _section(f"diagnose_metrics on a recorded overload (vLLM {meta['vllm_version']}, {load['concurrency']} "
                 f"concurrent requests against {' '.join(meta['flags'][-2:])})")
        print(render_report(out, max_caveats=2), end="")
    return out.model_dump(mode="json")


def _plan(as_json: bool) -> dict[str, Any]:
    from vllm_tune.tools.parallel import PlanInput, recommend_parallelism

    out = recommend_parallelism(PlanInput(model=PLAN_MODEL, gpu=PLAN_GPU, gpus=PLAN_GPUS, goal="latency",
                                          offline=True, top=2))
    if not as_json:
        _section(f"recommend_parallelism: {PLAN_MODEL} on {PLAN_GPUS}x {PLAN_GPU}, goal latency")
        for cand in out.candidates:
            print(f"  {cand.command}")
            if cand.estimate is not None:
                est = cand.estimate
                print(f"    estimate (roofline, not a measurement): TTFT {est.ttft_ms:.0f} ms, "
                      f"TPOT {est.tpot_ms:.1f} ms; reasons: {', '.join(dict.fromkeys(r.id for r in cand.reasons))}")
        print(f"  {len(out.rejected)} layout(s) rejected, each with the rule that rejects it")
    dumped: dict[str, Any] = out.model_dump(mode="json")
    return dumped


def _moe(as_json: bool) -> dict[str, Any]:
    from vllm_tune.tools.moe.api import MoeInput, run_moe

    out = run_moe(MoeInput(model=MOE_MODEL, gpu=MOE_GPU, tp=MOE_TP, mode="check", offline=True))
    if not as_json:
        _section(f"tune_moe check: {MOE_MODEL} on {MOE_GPU}, TP{MOE_TP}")
        print(f"  vLLM looks for {out.config_file_name}")
        print(f"  {out.status}: {out.meaning}")
        for near in out.nearest[:2]:
            print(f"  nearest: {near.file_name} [{near.relation}]")
        print(f"  tune it on a {MOE_GPU}: {out.tune_command}")
    dumped: dict[str, Any] = out.model_dump(mode="json")
    return dumped


def _demo(args: argparse.Namespace) -> int:
    as_json = bool(args.json)
    if not as_json:
        print("vllm-tune demo: offline, on embedded data (no server, GPU or network needed)")
    result: dict[str, Any] = {"knowledge": _knowledge(as_json), "diagnose": _diagnose(as_json)}
    result["plan"] = _plan(as_json)
    result["moe"] = _moe(as_json)
    if as_json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        _section("On your deployment")
        print("  vllm-tune diagnose http://127.0.0.1:8000 --slo ttft=500,tpot=50")
        print("  vllm-tune bench http://127.0.0.1:8000 --rate 4 --num-prompts 200 --slo ttft=500")
        print("  vllm-tune mcp    # the same tools for Claude Code or an IDE agent")
    return 0
