"""The tuning tools over MCP: honest annotations, a session started and read back, no server started unasked."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from vllm_tune.server.app import build_server

pytestmark = pytest.mark.anyio


async def test_tuning_tools_annotations_and_confirmation(tmp_path: Path) -> None:
    async with Client(build_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        hints = {name: (tools[name].annotations.read_only_hint, tools[name].annotations.open_world_hint)  # type: ignore[union-attr]
                 for name in ("tune_start", "tune_next", "tune_record", "tune_run_trial", "tune_report")}
        assert hints == {"tune_start": (False, False), "tune_next": (False, False), "tune_record": (False, False),
                         "tune_run_trial": (False, False), "tune_report": (True, False)}
        started = await client.call_tool("tune_start", {
            "command": "vllm serve org/m --max-num-seqs 8", "workload": {"concurrency": 4},
            "save_result": str(tmp_path), "vllm_version": "0.34.0"})
        assert not started.is_error and started.structured_content is not None
        sid = started.structured_content["session_id"]
        assert started.structured_content["trials"][0]["status"] == "proposed"
        report = await client.call_tool("tune_report", {"session_id": sid, "save_result": str(tmp_path)})
        assert not report.is_error and report.structured_content["state"] == "needs-measurement"  # type: ignore[index]
        assert report.structured_content["server"] is None  # type: ignore[index]  # no trial server running
        # no elicitation in this session and no confirm: nothing is started
        refused = await client.call_tool("tune_run_trial", {"session_id": sid, "save_result": str(tmp_path)})
        assert refused.is_error and "confirm=true" in str(refused.content)
        assert not any(p.name.startswith("trial-") for p in Path(started.structured_content["path"]).parent.iterdir())
