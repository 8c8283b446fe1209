"""scripts/pack_whatif_runs.py: a kept run of the accuracy protocol becomes one file the replay reads."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from vllm_tune.tools.whatif.accuracy import BENCH_SEED, PROOF_SEED, load_saved, saved_seed

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pack_whatif_runs.py"


def _result(seed: int) -> dict[str, object]:
    return {"provenance": {"seed": seed}, "mean_ttft_ms": 12.5, "ttfts": [0.0123456789, 0.02],
            "input_lens": [64, 64], "output_lens": [8, 8], "latencies": [0.1, 0.2], "queue_times": [0.0, 0.0],
            "client_check": {"ok": True}, "server": {"server_mean_ttft_ms": 11.0, "diagnosis": {"findings": []}}}


def _pack(runs: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(runs), str(out)], capture_output=True, text=True,
                          timeout=120)


def test_a_kept_run_packs_into_what_the_replay_reads(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for i, seed in enumerate((2000, 200)):
        (runs / f"2026120{i}-run").mkdir(parents=True)
        (runs / f"2026120{i}-run" / "result.json").write_text(json.dumps(_result(seed)), encoding="utf-8")
    out = tmp_path / "proof-2026-12-07T1340.jsonl.gz"
    proc = _pack(runs, out)
    assert proc.returncode == 0, proc.stderr
    assert "2 results" in proc.stdout
    packed = load_saved(out)
    assert [r["provenance"]["seed"] for r in packed] == [2000, 200]  # folder order, as load_saved reads a folder
    first = packed[0]
    # what the replay does not read is left out; each request's TTFT is kept to the microsecond
    assert not {"latencies", "queue_times", "client_check"} & set(first)
    assert first["server"] == {"server_mean_ttft_ms": 11.0}
    assert first["ttfts"] == [0.012346, 0.02] and first["input_lens"] == [64, 64]
    # the same runs give the same bytes (no timestamp in the gzip header)
    again = tmp_path / "again.jsonl.gz"
    assert _pack(runs, again).returncode == 0
    assert again.read_bytes() == out.read_bytes()
    assert json.loads(gzip.decompress(out.read_bytes()).decode().splitlines()[1])["provenance"]["seed"] == 200


def test_the_name_says_whose_seeds_a_saved_run_carries() -> None:
    assert saved_seed("tests/data/whatif/proof-2026-12-07T1209.jsonl.gz") == PROOF_SEED == 200
    assert saved_seed(Path("/tmp/proof-runs")) == PROOF_SEED
    assert saved_seed("tests/data/whatif/pinned-2026-12-07T1051.jsonl.gz") == BENCH_SEED == 100


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    empty = _pack(tmp_path / "nothing-here", tmp_path / "x.jsonl.gz")
    assert empty.returncode == 2 and "no result.json" in empty.stderr and "Traceback" not in empty.stderr
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "result.json").write_text("{not json", encoding="utf-8")
    broken = _pack(tmp_path / "r", tmp_path / "x.jsonl.gz")
    assert broken.returncode == 2 and "cannot pack" in broken.stderr and "Traceback" not in broken.stderr
    wrong = _pack(tmp_path / "r", tmp_path / "x.json")
    assert wrong.returncode == 2 and ".jsonl.gz" in wrong.stderr
