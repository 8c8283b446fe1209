"""The wheel ships one import package, `vllm_tune`, with its data; nothing named `server` or `tools`."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_holds_only_vllm_tune_and_its_data(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(ROOT)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(tmp_path.glob("vllm_tune-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"vllm_tune"}
    for module in ("vllm_tune/cli/main.py", "vllm_tune/server/app.py", "vllm_tune/tools/kb/schema.py",
                   "vllm_tune/tools/diagnose/api.py", "vllm_tune/knowledge/entries/triage.yaml",
                   "vllm_tune/knowledge/samples/overload/before.prom",
                   "vllm_tune/knowledge/samples/overload/server.log"):
        assert module in names, module
    assert not any("/tests/" in n or n.startswith("tests/") for n in names)
