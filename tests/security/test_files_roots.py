"""File arguments over MCP: only regular files under the allowed roots, read with a cap while reading, and one
line that says nothing about paths outside the roots (tools/files.py, set per call by server/registry.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import ListRootsResult, Root

from vllm_tune.server.app import build_server
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.files import read_text

pytestmark = pytest.mark.anyio

SHADOW = "root:$6$Qz9saltsalt$HASHHASHHASHHASHvery.secret.hash.value/xyz:19700:0:99999:7:::\n" \
         "daemon:*:19700:0:99999:7:::\nbin:*:19700:0:99999:7:::\n"


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Only `inside/` is allowed; `outside/` holds files the caller must not reach."""
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    monkeypatch.setenv("VLLM_TUNE_FILE_ROOTS", str(inside))
    monkeypatch.setenv("VLLM_TUNE_RESULTS_DIR", str(inside / "results"))
    return tmp_path


def _text(result: Any) -> str:
    return str(result.content[0].text)


async def _call(name: str, args: dict[str, Any], **client: Any) -> Any:
    async with Client(build_server(), **client) as c:
        return await c.call_tool(name, args)


async def test_lint_config_file_dev_zero_is_refused_at_once(roots: Path) -> None:
    started = time.monotonic()
    result = await _call("lint_config", {"config_file": "/dev/zero", "offline": True})
    assert result.is_error
    assert "not under the allowed file roots" in _text(result)
    assert time.monotonic() - started < 10


async def test_dev_zero_inside_the_roots_through_a_symlink_is_refused(roots: Path) -> None:
    link = roots / "inside" / "config.yaml"
    link.symlink_to("/dev/zero")
    result = await _call("lint_config", {"config_file": str(link), "offline": True})
    assert result.is_error and "not under the allowed file roots" in _text(result)


async def test_a_symlink_out_of_the_roots_is_refused(roots: Path) -> None:
    secret = roots / "outside" / "serve.yaml"
    secret.write_text("max-num-seqs: 8\n")
    link = roots / "inside" / "serve.yaml"
    link.symlink_to(secret)
    result = await _call("lint_config", {"config_file": str(link), "offline": True})
    assert result.is_error and "not under the allowed file roots" in _text(result)


async def test_a_config_inside_the_roots_is_read(roots: Path) -> None:
    good = roots / "inside" / "serve.yaml"
    good.write_text("max-num-seqs: 8\n")
    result = await _call("lint_config", {"config_file": str(good), "offline": True, "vllm_version": "0.32.0"})
    assert not result.is_error, _text(result)
    assert result.structured_content["settings"]["max_num_seqs"] == "8"


async def test_a_config_named_inside_the_command_line_obeys_the_roots(roots: Path) -> None:
    secret = roots / "outside" / "serve.yaml"
    secret.write_text("max-num-seqs: 8\n")
    result = await _call("lint_config", {"command": f"vllm serve org/m --config {secret}", "offline": True})
    assert not result.is_error
    assert "max_num_seqs" not in result.structured_content["settings"]
    assert any("not under the allowed file roots" in n for n in result.structured_content["notes"])


async def test_shadow_lines_never_come_back(roots: Path) -> None:
    shadow = roots / "inside" / "shadow"
    shadow.write_text(SHADOW)
    result = await _call("lint_config", {"config_file": str(shadow), "offline": True})
    dumped = _text(result) + str(result.structured_content)
    assert "HASHHASH" not in dumped and "root:" not in dumped and "daemon" not in dumped


async def test_shadow_style_mapping_keys_are_not_echoed(roots: Path) -> None:
    # Lines YAML does read as a mapping, but whose keys are no option names: counted, never quoted.
    shadow = roots / "inside" / "shadow.yaml"
    shadow.write_text("root:$6$Qz9salt$HASHHASH:19700:0:99999:7:::\nmax-num-seqs: 8\n")
    result = await _call("lint_config", {"config_file": str(shadow), "offline": True})
    assert not result.is_error
    dumped = str(result.structured_content)
    assert "HASHHASH" not in dumped and "root:" not in dumped
    assert any(p["problem"] == "unknown" for p in result.structured_content["option_problems"])


async def test_compare_runs_does_not_say_whether_a_path_outside_exists(roots: Path) -> None:
    real = roots / "outside" / "result.json"
    real.write_text("{}")
    missing = roots / "outside" / "nothing-here.json"
    answers = []
    for path in (real, missing, roots / "outside"):
        result = await _call("compare_runs", {"runs": [str(path), str(path)]})
        assert result.is_error
        answers.append(_text(result).replace(str(path), "<P>"))
    assert answers[0] == answers[1] == answers[2]
    assert "not under the allowed file roots" in answers[0]


async def test_run_benchmark_trace_and_dataset_on_dev_zero_are_refused(roots: Path) -> None:
    for args in ({"trace": "/dev/zero"}, {"dataset": "/dev/zero", "concurrency": 1}):
        started = time.monotonic()
        result = await _call("run_benchmark", {"url": "http://127.0.0.1:9", "model": "m", "num_prompts": 1, **args})
        assert result.is_error and "not under the allowed file roots" in _text(result), _text(result)
        assert time.monotonic() - started < 10


async def test_run_benchmark_trace_that_is_a_fifo_inside_the_roots_is_refused(roots: Path) -> None:
    fifo = roots / "inside" / "trace.jsonl"
    os.mkfifo(fifo)
    result = await _call("run_benchmark", {"url": "http://127.0.0.1:9", "model": "m", "trace": str(fifo),
                                           "num_prompts": 1})
    assert result.is_error and "not a regular file" in _text(result)


async def test_tune_moe_log_file_outside_the_roots_is_refused(roots: Path) -> None:
    log = roots / "outside" / "server.log"
    log.write_text("INFO Using default MoE config. Performance might be sub-optimal!\n")
    result = await _call("tune_moe", {"model": "deepseek-r1", "gpu": "H200", "tp": 8, "log_file": str(log),
                                      "mode": "check"})
    assert result.is_error and "not under the allowed file roots" in _text(result), _text(result)


async def test_mcp_roots_of_the_client_replace_the_environment_roots(roots: Path, monkeypatch:
                                                                     pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_TUNE_FILE_ROOTS", os.pathsep.join([str(roots / "inside"), str(roots / "outside")]))
    (roots / "outside" / "serve.yaml").write_text("max-num-seqs: 8\n")
    (roots / "inside" / "serve.yaml").write_text("max-num-seqs: 8\n")

    async def list_roots(_ctx: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=(roots / "inside").as_uri())])  # type: ignore[arg-type]

    # roots/list is a server-to-client request, which only the initialize-handshake protocol carries
    async with Client(build_server(), list_roots_callback=list_roots, mode="legacy") as c:
        inside = await c.call_tool("lint_config", {"config_file": str(roots / "inside" / "serve.yaml"),
                                                   "offline": True})
        outside = await c.call_tool("lint_config", {"config_file": str(roots / "outside" / "serve.yaml"),
                                                    "offline": True})
    assert not inside.is_error, _text(inside)
    assert outside.is_error and "MCP roots" in _text(outside)


def _within(seconds: float, fn: Any) -> Any:
    """fn() in a thread; fails (instead of hanging the suite) when it does not return in time."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the read hung"
    return box


def test_the_cli_reads_any_regular_file_but_never_a_device_or_fifo(tmp_path: Path) -> None:
    anywhere = tmp_path / "x.yaml"
    anywhere.write_text("a: 1\n")
    assert read_text(anywhere, limit=100) == "a: 1\n"  # no roots outside MCP
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        box = _within(10, lambda p=path: read_text(p, limit=1024))
        assert isinstance(box.get("error"), BadInputError) and "not a regular file" in str(box["error"])


def test_the_cap_holds_while_reading_not_from_st_size(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 5000)
    with pytest.raises(BadInputError, match="larger than"):
        read_text(big, limit=4096)
    # /proc files report st_size 0 whatever they hold
    proc = Path("/proc/self/status")
    if proc.exists():
        with pytest.raises(BadInputError, match="larger than"):
            read_text(proc, limit=10)


def test_cli_lint_on_dev_zero_exits_2_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    from vllm_tune.cli.main import main

    box = _within(20, lambda: main(["lint", "--config", "/dev/zero", "--offline"]))
    assert box.get("value") == 2, box
    assert "not a regular file" in capsys.readouterr().err


async def test_tune_moe_folders_outside_the_roots_are_refused(roots: Path) -> None:
    for arg in ("tuned_folder", "output_dir"):
        result = await _call("tune_moe", {"model": "deepseek-r1", "gpu": "H200", "tp": 8, "mode": "check",
                                          arg: str(roots / "outside")})
        assert result.is_error and "not under the allowed file roots" in _text(result), _text(result)


async def test_benchmark_results_under_a_results_folder_outside_the_roots(roots: Path) -> None:
    run = roots / "outside" / "20261204-010203-abcdef"
    run.mkdir()
    (run / "status.json").write_text('{"run_id": "20261204-010203-abcdef", "state": "completed"}')
    (run / "result.json").write_text('{"secret": 1}')
    for tool in ("benchmark_status", "benchmark_results"):
        result = await _call(tool, {"run_id": run.name, "save_result": str(roots / "outside")})
        assert result.is_error and "not under the allowed file roots" in _text(result), _text(result)
        assert "secret" not in _text(result)
