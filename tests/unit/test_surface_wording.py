"""Messages that tell the caller what to do next use the words of the surface in use: flags and commands on
the CLI, tool and argument names over MCP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from vllm_tune.cli.main import main as cli_main
from vllm_tune.server.app import build_server

BASE = "vllm serve org/m --max-num-seqs 8"

pytestmark = pytest.mark.anyio


def test_cli_says_commands_and_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["tune", "start", "--command", BASE, "--concurrency", "2", "--save-result", str(tmp_path),
                     "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert "vllm-tune tune run" in state["next_step"] and "tune_run_trial" not in state["next_step"]
    assert cli_main(["tune", "run", state["session_id"], "--save-result", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--yes" in err and "confirm=true" not in err
    assert cli_main(["bench", "http://10.9.9.9:8000", "--max-concurrency", "1"]) == 2
    assert "VLLM_TUNE_ALLOWED_TARGETS" in capsys.readouterr().err  # not listed: refused before any question
    from vllm_tune.tools.bench.api import RunBenchmarkInput, check_target
    from vllm_tune.tools.net.targets import TargetPolicy

    with pytest.raises(Exception, match="--yes"):
        check_target(RunBenchmarkInput(url="http://10.9.9.9:8000", concurrency=1),
                     TargetPolicy.of(["10.9.9.9"]))


async def test_mcp_says_tools_and_arguments(tmp_path: Path) -> None:
    async with Client(build_server()) as client:
        started = await client.call_tool("tune_start", {"command": BASE, "workload": {"concurrency": 2},
                                                        "save_result": str(tmp_path)})
        assert not started.is_error
        step = (started.structured_content or {})["next_step"]
        assert "tune_run_trial" in step and "vllm-tune tune run" not in step
        refused = await client.call_tool("tune_run_trial", {"session_id": started.structured_content["session_id"],
                                                            "save_result": str(tmp_path)})
        assert refused.is_error and "confirm=true" in str(refused.content) and "--yes" not in str(refused.content)
