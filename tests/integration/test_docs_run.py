"""The README's and SKILL.md's command blocks run as written: every `vllm-tune ...` line in a ```bash block
is executed, against the bundled samples (the docs name real sample paths) or the suite's real vLLM server
and Prometheus (the docs' http://127.0.0.1:8000 and http://prom:9090 stand for them). A line that cannot run
here is listed below with the reason; any other line that is not a `vllm-tune` command fails the test, so a
new example cannot slip in untested."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support.prometheus import PrometheusServer
from support.vllm_server import VllmServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "SKILL.md")
# Lines of the docs that are not run here, by how they start, and why.
NOT_RUN = {
    "python3 -m venv": "installs the project: scripts/check does exactly this first",
    "scripts/check": "is this test suite",
    "git clone": "needs the network",
    "pipx install": "needs pipx and the network",
    "uvx": "needs uv and the network",
    "claude ": "needs Claude Code",
    "vllm-tune tune loop": "starts vLLM with an 8B model; test_tune_vllm.py runs the loop on the tiny model",
    "vllm-tune mcp": "a server that waits for a client; test_mcp_stdio.py drives it",
}
# Exit codes a documented command may end with besides 0 (README: lint exits 1 when something is worth fixing).
ALSO_OK = {"lint": {1}}


def _lines() -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    for doc in DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8").splitlines()
        in_bash, pending, start = False, "", 0
        for no, line in enumerate(text, 1):
            if line.startswith("```"):
                in_bash = line.strip() == "```bash" and not in_bash
                continue
            if not in_bash:
                continue
            stripped = line.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if not pending:
                start = no
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            out.append((doc, start, (pending + stripped).strip()))
            pending = ""
    return out


def _argv(line: str) -> list[str]:
    words = shlex.split(line, comments=True)
    return words


LINES = _lines()


def test_the_docs_have_commands_and_every_line_is_run_or_explained() -> None:
    commands = [line for _, _, line in LINES if line.startswith("vllm-tune ")]
    assert len(commands) >= 15
    unknown = [f"{doc}:{no}: {line}" for doc, no, line in LINES
               if not line.startswith("vllm-tune ") and not any(line.startswith(p) for p in NOT_RUN)]
    assert unknown == []


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the commands run: the docs' relative sample paths resolve, and what they write stays here."""
    work = tmp_path_factory.mktemp("docs")
    (work / "knowledge").symlink_to(ROOT / "knowledge")
    return work


def _run(line: str, work: Path, vllm: VllmServer, prom: PrometheusServer, session: list[str]) -> None:
    text = line.replace("http://127.0.0.1:8000", vllm.url).replace("http://prom:9090", prom.url)
    if session:
        text = re.sub(r"tune-\d{8}-\d{6}-[0-9a-f]{6}", session[0], text)
    argv = _argv(text)
    env = {**os.environ, "VLLM_TUNE_RESULTS_DIR": str(work / "results"), "HF_HUB_OFFLINE": "1",
           "VLLM_TUNE_ALLOWED_TARGETS": "127.0.0.1"}
    proc = subprocess.run([sys.executable, "-m", "vllm_tune.cli", *argv[1:]], cwd=work, env=env, text=True,
                          capture_output=True, timeout=600, check=False)
    allowed = {0} | ALSO_OK.get(argv[1], set())
    assert proc.returncode in allowed, f"{line}\nexit {proc.returncode}\n{proc.stderr[-2000:]}\n{proc.stdout[-1500:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    found = re.search(r"tune-\d{8}-\d{6}-[0-9a-f]{6}", proc.stdout)
    if argv[1:3] == ["tune", "start"] and found:
        session[:] = [found.group(0)]


def test_every_documented_command_runs(workdir: Path, vllm_server: VllmServer, prometheus: PrometheusServer) -> None:
    session: list[str] = []
    ran = 0
    for _doc, _no, line in LINES:
        if line.startswith("vllm-tune ") and not any(line.startswith(p) for p in NOT_RUN):
            _run(line, workdir, vllm_server, prometheus, session)
            ran += 1
    assert ran >= 12
