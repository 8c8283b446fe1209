"""tune_moe end to end through its request model, the CLI and the MCP server (CPU only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, types

from vllm_tune.cli.main import main as cli_main
from vllm_tune.server.app import build_server
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.moe.api import MoeInput, run_moe
from vllm_tune.tools.moe.verify import compare_ab

MIXTRAL = "mistralai/Mixtral-8x7B-Instruct-v0.1"


def _req(**kw: object) -> MoeInput:
    base: dict[str, object] = {"model": MIXTRAL, "gpu": "H100", "offline": True, "vllm_version": "0.32.0"}
    base.update(kw)
    return MoeInput.model_validate(base)


def test_check_reports_name_status_and_cites_existing_ids() -> None:
    out = run_moe(_req(tp=1))
    assert (out.E, out.N, out.device_name, out.dtype, out.block_shape) == (8, 14336, "NVIDIA_H100_80GB_HBM3", None,
                                                                           None)
    assert out.config_file_name == "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"
    assert out.status == "missing" and out.nearest and out.down_config_file_name is None  # 0.32 has no _down
    assert "--tp-size 1" in out.vllm_script_command and "--mode tune" in out.tune_command
    kb = load_knowledge()
    assert "triage.moe-default-config" in out.knowledge_ids
    assert [i for i in out.knowledge_ids if i not in kb] == []


def test_every_id_the_tool_can_cite_exists(tmp_path: Path) -> None:
    kb = load_knowledge()
    outs = [run_moe(_req(model="deepseek-ai/DeepSeek-V3", gpu="B300", dp=8, ep=True, mode="plan",
                         vllm_version=None)),
            run_moe(_req(mode="verify", tuned_folder=str(tmp_path)))]
    cited = {i for o in outs for i in o.knowledge_ids}
    assert {"moe.tuning-method", "moe.ab-verify-end-to-end", "moe.down-config-file",
            "pitfall.moe-experts-not-divisible"} <= cited
    assert sorted(i for i in cited if i not in kb) == []


def test_plan_and_tune_refusals_without_gpu_confirm_or_budget() -> None:
    plan = run_moe(_req(mode="plan", batch_sizes=[1, 64]))
    assert plan.plan is not None and plan.plan.batch_sizes == [1, 64] and plan.plan.total_points > 0
    no_confirm = run_moe(_req(mode="tune", budget_minutes=5))
    assert no_confirm.tune is not None and not no_confirm.tune.ran and "confirm" in (no_confirm.tune.reason or "")
    no_budget = run_moe(_req(mode="tune", confirm=True))
    assert no_budget.tune is not None and not no_budget.tune.ran and "budget" in (no_budget.tune.reason or "")
    no_gpu = run_moe(_req(mode="tune", confirm=True, budget_minutes=5))
    assert no_gpu.tune is not None and not no_gpu.tune.ran and "no GPU" in (no_gpu.tune.reason or "")
    assert no_gpu.plan is not None and no_gpu.tune_command.endswith("--yes")


def test_tune_with_test_backend_writes_a_file_verify_accepts(tmp_path: Path) -> None:
    out = run_moe(_req(model="Qwen/Qwen3-30B-A3B", gpu="H200", tp=8, mode="tune", confirm=True, budget_minutes=5,
                       backend="cost-model", search="quick", batch_sizes=[1, 8], tuned_folder=str(tmp_path)))
    assert out.tune is not None and out.tune.ran and out.tune.complete
    assert out.tune.reason and "test backend" in out.tune.reason
    written = Path(out.tune.written or "")
    assert written == tmp_path / "E=128,N=96,device_name=NVIDIA_H200.json"
    assert sorted(json.loads(written.read_text())) == ["1", "8"]
    again = run_moe(_req(model="Qwen/Qwen3-30B-A3B", gpu="H200", tp=8, mode="verify", tuned_folder=str(tmp_path)))
    assert again.status == "tuned" and again.verify is not None
    assert again.verify.loaded_by_lookup and again.verify.batch_sizes == [1, 8] and again.verify.problems == []
    assert any("VLLM_TUNED_CONFIG_FOLDER" in step for step in again.verify.ab_plan)


def _result(path: Path, thr: float, tpot: float, std: float = 2.0) -> str:
    path.write_text(json.dumps({"output_throughput": thr, "mean_tpot_ms": tpot, "std_tpot_ms": std,
                                "mean_ttft_ms": 100.0, "std_ttft_ms": 10.0, "completed": 400}))
    return str(path)


def test_ab_comparison_with_noise(tmp_path: Path) -> None:
    base = [_result(tmp_path / "a1.json", 1000, 20.0), _result(tmp_path / "a2.json", 1010, 20.2)]
    tuned = [_result(tmp_path / "b1.json", 1200, 17.0), _result(tmp_path / "b2.json", 1190, 17.1)]
    by = {m.metric: m for m in compare_ab(base, tuned)}
    assert by["output_throughput"].verdict == "better" and by["output_throughput"].change_pct > 15
    assert by["mean_tpot_ms"].verdict == "better" and by["mean_ttft_ms"].verdict == "within noise"
    single = {m.metric: m for m in compare_ab(base[:1], [_result(tmp_path / "c.json", 1003, 19.99)])}
    assert single["output_throughput"].noise_pct is None and "repeat" in single["output_throughput"].verdict
    assert single["mean_tpot_ms"].verdict == "within noise" and single["mean_tpot_ms"].noise_pct is not None
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(BadInputError):
        compare_ab([str(tmp_path / "bad.json")], tuned)


def test_bad_inputs_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BadInputError):
        run_moe(_req(log_file=str(tmp_path / "missing.log")))
    with pytest.raises(ValueError):
        _req(batch_sizes=[0])
    assert cli_main(["moe", MIXTRAL, "--gpu", "H100", "--tp", "3", "--offline"]) == 2
    assert cli_main(["moe", MIXTRAL, "--gpu", "H100", "--dtype", "fp6", "--offline"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "does not divide" in err


def test_cli_json_and_log_reading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_text("WARNING [fused_moe.py:1164] Using default MoE config. Performance might be sub-optimal! Config "
                   "file not found at /venv/configs/E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json\n")
    assert cli_main(["moe", MIXTRAL, "--gpu", "H100", "--tp", "2", "--offline", "--log-file", str(log), "--json",
                     "--vllm-version", "0.32.0"]) == 0
    data = json.loads(capsys.readouterr().out)
    for field in ("config_file_name", "E", "N", "device_name", "dtype", "block_shape", "status", "nearest",
                  "tune_command"):
        assert field in data
    assert data["status"] == "shipped" and data["log"]["default_warnings"] == 1
    assert data["log"]["lines"][0]["matches_expected"] is True
    assert cli_main(["moe", MIXTRAL, "--gpu", "H100", "--tune", "--budget", "1", "--offline"]) == 1


@pytest.mark.anyio
async def test_mcp_tool_is_annotated_and_answers() -> None:
    async with Client(build_server(), raise_exceptions=True) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        tool = tools["tune_moe"]
        assert tool.annotations is not None
        assert tool.annotations.destructive_hint is True and tool.annotations.read_only_hint is False
        assert {"model", "gpu", "tp", "dp", "ep", "mode", "confirm", "budget_minutes"} <= set(
            tool.input_schema["properties"])
        result = await client.call_tool("tune_moe", {"model": MIXTRAL, "gpu": "H200", "tp": 4, "offline": True,
                                                     "vllm_version": "0.32.0"})
        assert not result.is_error and result.structured_content is not None
        assert result.structured_content["config_file_name"] == "E=8,N=3584,device_name=NVIDIA_H200.json"
        assert result.structured_content["status"] == "shipped"
        bad = await client.call_tool("tune_moe", {"model": MIXTRAL, "gpu": "H200", "tp": 0})
        assert bad.is_error


_TUNE_ARGS = {"model": "Qwen/Qwen3-30B-A3B", "gpu": "H200", "tp": 8, "offline": True, "mode": "tune",
              "budget_minutes": 1, "backend": "cost-model", "search": "quick", "batch_sizes": [4]}


@pytest.mark.anyio
async def test_mcp_tune_without_confirm_and_without_elicitation_refuses(tmp_path: Path) -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("tune_moe", {**_TUNE_ARGS, "tuned_folder": str(tmp_path)})
        assert not result.is_error and result.structured_content is not None
        tune = result.structured_content["tune"]
        assert tune["ran"] is False and "confirm" in tune["reason"]
    assert not any(tmp_path.glob("*.json"))


@pytest.mark.anyio
async def test_mcp_tune_asks_through_elicitation(tmp_path: Path) -> None:
    asked: list[str] = []

    async def accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(getattr(params, "message", ""))
        return types.ElicitResult(action="accept", content={"confirm": True})

    # elicitation needs a back-channel: the stateful (legacy handshake) session has one, the stateless mode does not
    async with Client(build_server(), elicitation_callback=accept, mode="legacy") as client:
        result = await client.call_tool("tune_moe", {**_TUNE_ARGS, "tuned_folder": str(tmp_path)})
        assert not result.is_error and result.structured_content is not None
        assert result.structured_content["tune"]["ran"] is True
    assert asked and "Qwen/Qwen3-30B-A3B" in asked[0]
    assert (tmp_path / "E=128,N=96,device_name=NVIDIA_H200.json").is_file()
