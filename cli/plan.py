"""`vllm-tune plan MODEL --gpu TYPE --gpus N`: a valid, ranked, explained parallel layout."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING, Any

from vllm_tune.cli.common import parse_key_values, print_json

if TYPE_CHECKING:
    from vllm_tune.tools.parallel import Candidate, PlanOutput


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="recommend tensor/pipeline/data/expert parallelism and the vllm serve command",
                       description="Enumerate every parallel layout for MODEL on N GPUs, reject the invalid ones by "
                                   "rule, and rank the rest with a step-time estimate fitted to published "
                                   "measurements (an estimate, not a measurement; its residuals are printed). "
                                   "--estimator aic|both shows NVIDIA AIConfigurator's estimate beside ours; "
                                   "--verify URL measures the first layout on a server you started with its "
                                   "command.")
    p.add_argument("model", help="catalog name (e.g. deepseek-r1), local dir or config.json, or Hugging Face id")
    p.add_argument("--gpu", required=True, help="GPU type: H100, H200, B200, MI300X, ... or a full device name")
    p.add_argument("--gpus", required=True, type=int, help="number of GPUs available")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: the GPU's usual node size)")
    p.add_argument("--interconnect", choices=("nvlink", "pcie"), help="GPU link inside a node")
    p.add_argument("--gpu-memory-gib", type=float, help="override GPU memory (custom hardware)")
    p.add_argument("--goal", choices=("latency", "throughput", "balanced"), default="balanced",
                   help="what the ranking optimises")
    p.add_argument("--isl", type=int, default=1024, help="input tokens per request")
    p.add_argument("--osl", type=int, default=256, help="output tokens per request")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, help="requests in flight")
    load.add_argument("--rate", type=float, help="request rate (requests/s)")
    p.add_argument("--slo", help="SLO in ms, e.g. ttft=500,tpot=50")
    p.add_argument("--quantization", help="serve as fp8 / nvfp4 / mxfp4 / awq ... (default: checkpoint format)")
    p.add_argument("--kv-cache-dtype", default="auto", help="auto | fp8 | fp8_e4m3 | fp8_e5m2")
    p.add_argument("--max-model-len", type=int, help="context length to plan for")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="share of GPU memory vLLM may use, as vllm serve takes it")
    p.add_argument("--vllm-version", default="0.34.0", help="vLLM version the command must be valid for")
    p.add_argument("--head-address", help="head node address for multi-node commands (default: HEAD_NODE_IP)")
    p.add_argument("--revision", help="hub revision for Hugging Face ids")
    p.add_argument("--offline", action="store_true", help="never contact the hub (catalog and cache only)")
    p.add_argument("--top", type=int, default=5, help="candidates to show")
    p.add_argument("--estimator", choices=("builtin", "aic", "both"), default="builtin",
                   help="builtin: our fitted step-time model (default); aic: NVIDIA AIConfigurator's estimate "
                        "beside each candidate (needs `pip install 'vllm-tune[aic]'`; NVIDIA GPUs and the model "
                        "configs it ships); both: the two side by side")
    p.add_argument("--verify", metavar="URL",
                   help="after planning, run a short benchmark at the plan's workload against a vLLM server "
                        "already started with the first candidate's command, and print estimate vs measured "
                        "per metric (the result is saved with the plan's flags and hardware for `vllm-tune "
                        "calibrate`)")
    p.add_argument("--verify-prompts", type=int, default=40, help="measured requests of the --verify run")
    p.add_argument("--verify-result-dir", "--verify-save-result", dest="verify_save_result", metavar="DIR",
                   help="results directory for --verify")
    p.add_argument("--yes", action="store_true", help="confirm sending the --verify load to a non-loopback server")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.set_defaults(handler=_plan)


def _slo(text: str | None) -> tuple[float | None, float | None]:
    from vllm_tune.tools.errors import BadInputError

    if not text:
        return None, None
    values = parse_key_values(text)
    unknown = set(values) - {"ttft", "tpot"}
    if unknown:
        raise BadInputError(f"--slo knows ttft and tpot (ms), not {', '.join(sorted(unknown))}")
    try:
        ttft = float(values["ttft"]) if "ttft" in values else None
        tpot = float(values["tpot"]) if "tpot" in values else None
    except ValueError:
        raise BadInputError(f"--slo values must be numbers of milliseconds: {text!r}") from None
    return ttft, tpot


def _plan(args: argparse.Namespace) -> int:
    from vllm_tune.tools.parallel import PlanInput, recommend_parallelism

    ttft, tpot = _slo(args.slo)
    request = PlanInput(
        model=args.model, revision=args.revision, offline=args.offline, gpu=args.gpu, gpus=args.gpus,
        gpus_per_node=args.gpus_per_node, interconnect=args.interconnect, gpu_memory_gib=args.gpu_memory_gib,
        goal=args.goal, isl=args.isl, osl=args.osl, concurrency=args.concurrency, rate=args.rate,
        slo_ttft_ms=ttft, slo_tpot_ms=tpot, quantization=args.quantization, kv_cache_dtype=args.kv_cache_dtype,
        max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
        vllm_version=args.vllm_version, head_address=args.head_address, top=args.top, estimator=args.estimator,
        verify_url=args.verify, verify_prompts=args.verify_prompts, verify_save_result=args.verify_save_result,
        verify_confirm=args.yes,
    )
    out = recommend_parallelism(request)
    if request.verify_url is not None and out.feasible:
        import asyncio

        from vllm_tune.tools.parallel.verify import verify_plan

        out = out.model_copy(update={"verification": asyncio.run(verify_plan(out, request))})
    if args.json:
        print_json(out)
    else:
        print(render_plan(out))
    return 0  # "nothing fits" is an answer (feasible=false, with what would fit), not a failure


def _with_env(command: str, env: dict[str, str]) -> str:
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())), command])


def _launch_lines(c: Candidate) -> list[str]:
    if not c.node_commands:
        return [f"    {_with_env(c.command, c.env)}"]
    lines = [f"    {c.launch}: {len(c.node_commands)} nodes, one command each"]
    for n in c.node_commands:
        ranks = n.data_parallel_ranks
        dp = f", DP ranks {ranks[0]}-{ranks[-1]}" if ranks else ""
        lines.append(f"    node {n.node} ({n.role}, {n.gpus} GPUs{dp}):")
        lines.extend(f"      {_with_env(step, n.env)}" for step in n.prepare)
        lines.append(f"      {_with_env(n.command, n.env)}")
    return lines


def _candidate_lines(c: Candidate) -> list[str]:
    m = c.memory
    lines = [f"#{c.rank}  {c.label()}  ({c.gpus_used} GPUs, score {c.score:.3g})",
             *_launch_lines(c),
             f"    memory/GPU: weights {m.weights_gib:.1f} + activations {m.activation_gib:.1f} + overhead "
             f"{m.overhead_gib:.1f} of {m.usable_gib:.1f} GiB usable -> KV {m.kv_cache_gib:.1f} GiB = "
             f"{m.kv_tokens_per_replica:,} tokens/replica ({m.max_concurrency_at_max_len:.1f}x max-len requests)"]
    e = c.estimate
    if e is not None:
        slo = "" if e.meets_slo is None else ("  meets SLO" if e.meets_slo else "  MISSES SLO")
        cal = f", calibrated for {e.calibration}" if e.calibration else ""
        lines.append(f"    estimate @ {e.concurrency_per_replica:.0f} req/replica: TTFT {e.ttft_ms:.0f} ms, TPOT "
                     f"{e.tpot_ms:.1f} ms, {e.output_tokens_per_s_per_gpu:,.0f} output tok/s/GPU "
                     f"(bound by {e.bottleneck}{cal}){slo}")
    pe = c.peer_estimate
    if pe is not None:
        if pe.output_tokens_per_s_per_gpu is not None:
            lines.append(f"    {pe.estimator}: TTFT {pe.ttft_ms or 0:.0f} ms, TPOT {pe.tpot_ms or 0:.1f} ms, "
                         f"{pe.output_tokens_per_s_per_gpu:,.0f} output tok/s/GPU ({pe.note})")
        else:
            lines.append(f"    {pe.estimator}: no estimate ({pe.note})")
    for r in c.reasons:
        lines.append(f"    + {r.why}  [{r.id}{', attributed claim' if r.attributed else ''}]")
    for w in c.warnings:
        lines.append(f"    ! {w.why}  [{w.id}{', attributed claim' if w.attributed else ''}]")
    return lines


def render_plan(out: PlanOutput) -> str:
    f = out.model
    moe = f" MoE {f.moe.num_experts}x top-{f.moe.top_k}" if f.moe else ""
    lines = [
        f"model: {f.name} ({f.source}; {f.architecture}, {f.params_total / 1e9:.1f}B params{moe}, "
        f"{f.attention.upper()}, weights {f.quant.weight_dtype}, {f.checkpoint_bytes / 1e9:.1f} GB)",
        f"hardware: {out.gpus} x {out.hardware.name} ({out.hardware.memory_gib:.1f} GiB, "
        f"{out.hardware.interconnect.kind}), {out.gpus_per_node} per node, {out.nodes} node(s)",
        "workload: " + ", ".join(f"{k}={v}" for k, v in out.workload.items() if v is not None),
        "",
        out.summary,
    ]
    if out.ranking_why:
        lines.append(f"why: {out.ranking_why}")
    if out.candidates and out.candidates[0].estimate is not None:
        lines.append(f"uncertainty: {out.candidates[0].estimate.uncertainty}")
    for warning in out.warnings:
        lines.append(f"note: {warning}")
    for cand in out.candidates:
        lines.append("")
        lines.extend(_candidate_lines(cand))
    if out.what_would_fit:
        lines.append("")
        lines.append("what would fit:")
        lines.extend(f"  - {tip}" for tip in out.what_would_fit)
    if out.rejected_total:
        lines.append("")
        lines.append(f"rejected layouts ({out.rejected_total}):")
        by_rule: dict[str, list[str]] = {}
        for r in out.rejected:
            by_rule.setdefault(r.rule, []).append(r.label())
        for rule, labels in by_rule.items():
            example = next(r.why for r in out.rejected if r.rule == rule)
            lines.append(f"  [{rule}] {', '.join(labels[:8])}{' ...' if len(labels) > 8 else ''}: {example}")
    if out.verification is not None:
        v = out.verification
        lines.append("")
        lines.append(f"verify: {v.layout} at {v.concurrency} requests in flight, {v.num_prompts} requests "
                     f"against {v.url} (result {v.result_path})")
        for m in v.metrics:
            ratio = f"{m.ratio:.2f}x" if m.ratio is not None else "n/a"
            meas = f"{m.measured:,.1f}" if m.measured is not None else "n/a"
            est = f"{m.estimate:,.1f}" if m.estimate is not None else "n/a"
            lines.append(f"  {m.metric:22s} estimate {est:>12s}  measured {meas:>12s}  estimate/measured {ratio}")
        lines.extend(f"  ! {w}" for w in v.warnings)
    lines.append("")
    lines.append("Estimates are fitted step-time estimates, not measurements; verify with `--verify URL` or "
                 "`vllm-tune bench`.")
    return "\n".join(lines)
