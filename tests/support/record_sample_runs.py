"""Record the bundled sample benchmark runs (knowledge/samples/runs/): the same load against the tiny Llama on
the real vLLM CPU server with --max-num-seqs 2 and then 4, measured by `vllm-tune bench`. The README's compare
and what-if examples run on them. Run from the repository root: python -m tests.support.record_sample_runs
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .tiny_models import ensure_tiny_models
from .vllm_server import start_vllm

OUT = Path(__file__).resolve().parents[2] / "knowledge" / "samples" / "runs"
LOAD = ["--max-concurrency", "8", "--num-prompts", "80", "--random-input-len", "64", "--random-output-len", "32",
        "--num-warmups", "4", "--seed", "11"]


def main() -> int:
    models = ensure_tiny_models(build=False)
    OUT.mkdir(parents=True, exist_ok=True)
    for seqs in (2, 4):
        with start_vllm(models.llama, args=["--max-num-seqs", str(seqs)]) as server, \
                tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "vllm_tune.cli", "bench", server.url, *LOAD, "--result-dir", tmp,
                   "--serve-flag", f"max_num_seqs={seqs}", "--label", f"max-num-seqs-{seqs}", "--json"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            result_path = Path(json.loads(done.stdout)["result_path"])
            shutil.copyfile(result_path, OUT / f"max-num-seqs-{seqs}.json")
            print(f"saved {OUT / f'max-num-seqs-{seqs}.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
