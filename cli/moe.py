"""`vllm-tune moe MODEL --gpu TYPE`: fused-MoE config file names, coverage, tuning and verification."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from vllm_tune.cli.common import print_json


def register(sub: Any) -> None:
    p = sub.add_parser("moe", help="find, tune and verify fused-MoE kernel configs",
                       description="Compute the fused-MoE config file vLLM looks for, check whether it exists, "
                                   "read a log for the default-config warning, tune it on a GPU, verify it.")
    p.add_argument("model", help="catalog id, local model dir, config.json or Hugging Face id")
    p.add_argument("--gpu", required=True, help="GPU type (H100, H200, B200, MI300X...) or torch device name")
    p.add_argument("--tp", type=int, default=1, help="--tensor-parallel-size of the deployment")
    p.add_argument("--dp", type=int, default=1, help="--data-parallel-size of the deployment")
    p.add_argument("--ep", action="store_true", help="expert parallelism (--enable-expert-parallel)")
    p.add_argument("--dtype", help="auto (default), bf16, fp8_w8a8, int8_w8a16, int4_w4a16, ...")
    p.add_argument("--log-file", help="vLLM server log to read for MoE config lines")
    p.add_argument("--tuned-folder", help="VLLM_TUNED_CONFIG_FOLDER to check / write (default: the env var)")
    p.add_argument("--mode", choices=("check", "plan", "tune", "verify"), default=None,
                   help="check (read-only, default), plan, tune (GPU, needs --yes and --budget) or verify")
    p.add_argument("--tune", action="store_true", help="same as --mode tune")
    p.add_argument("--budget", type=float, metavar="MIN", help="time budget for tuning, minutes")
    p.add_argument("--batch-sizes", type=int, nargs="+", metavar="N", help="batch sizes to tune (default: vLLM's 18)")
    p.add_argument("--search", choices=("quick", "pruned", "full"), default="pruned", help="size of the tile search")
    p.add_argument("--backend", choices=("triton", "cpu", "cost-model"), default="triton",
                   help="kernel timer (cpu and cost-model are test backends)")
    p.add_argument("--vllm-version", help="vLLM version whose shipped configs to check")
    p.add_argument("--vllm-python", help="python of an environment with vLLM (package configs, real lookup)")
    p.add_argument("--output-dir", help="where tuning writes (default: --tuned-folder or ./moe_configs)")
    p.add_argument("--baseline-results", nargs="+", default=[], metavar="FILE", help="verify: A results")
    p.add_argument("--tuned-results", nargs="+", default=[], metavar="FILE", help="verify: B results")
    p.add_argument("--offline", action="store_true", help="never contact the Hugging Face hub")
    p.add_argument("--yes", action="store_true", help="confirm the tuning job (it occupies the GPUs)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=_moe)


def _moe(args: argparse.Namespace) -> int:
    from vllm_tune.tools.moe.api import MoeInput, run_moe
    from vllm_tune.tools.moe.render import render_text

    mode = "tune" if args.tune else (args.mode or "check")
    req = MoeInput(model=args.model, gpu=args.gpu, tp=args.tp, dp=args.dp, ep=args.ep, dtype=args.dtype,
                   log_file=args.log_file, tuned_folder=args.tuned_folder, mode=mode, batch_sizes=args.batch_sizes,
                   budget_minutes=args.budget, confirm=args.yes, vllm_version=args.vllm_version,
                   vllm_python=args.vllm_python, output_dir=args.output_dir, backend=args.backend, search=args.search,
                   baseline_results=args.baseline_results, tuned_results=args.tuned_results, offline=args.offline)

    shown = [False]

    def progress(done: int, total: int, message: str) -> None:
        if not args.json:
            shown[0] = True
            print(f"\r[{done}/{total}] {message[:90]:<90}", end="", file=sys.stderr, flush=True)

    out = run_moe(req, progress=progress)
    if shown[0]:
        print(file=sys.stderr)
    if args.json:
        print_json(out)
        return 0
    print(render_text(out))
    if out.tune is not None and not out.tune.ran:
        return 1
    return 0
