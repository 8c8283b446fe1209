"""resolve_model on local paths and on a hub served from a loopback HTTP server (never huggingface.co)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.models import resolve_model

CONFIG: dict[str, Any] = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 1024, "num_hidden_layers": 4,
    "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 2816, "vocab_size": 32000,
    "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
}
INDEX = {"metadata": {"total_size": 123_456_789}, "weight_map": {}}
TOKEN = "hf_secret_token_value"


class _Hub:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str | None]] = []
        self.files: dict[str, tuple[int, bytes]] = {
            "/acme/tiny-mistral/resolve/main/config.json": (200, json.dumps(CONFIG).encode()),
            "/acme/tiny-mistral/resolve/main/model.safetensors.index.json": (200, json.dumps(INDEX).encode()),
            "/acme/tiny-mistral/resolve/v2/config.json": (200, json.dumps(dict(CONFIG, num_hidden_layers=8)).encode()),
            "/acme/gated/resolve/main/config.json": (403, b"{}"),
            "/acme/junk/resolve/main/config.json": (200, b"<html>not json</html>"),
        }


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, _Hub]]:
    state = _Hub()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append((self.path, self.headers.get("Authorization")))
            code, body = state.files.get(self.path, (404, b"not found"))
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for var in ("VLLM_TUNE_OFFLINE", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("VLLM_TUNE_HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def test_local_directory_and_config_path(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(INDEX))
    facts = resolve_model(str(tmp_path))
    assert facts.source == "local" and facts.num_layers == 4
    assert facts.checkpoint_bytes == 123_456_789 and facts.checkpoint_bytes_source == "index"
    assert resolve_model(str(tmp_path / "config.json")).num_kv_heads == 4


def test_local_errors(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"no config\.json"):
        resolve_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(BadInputError, match="not valid JSON"):
        resolve_model(str(tmp_path))
    with pytest.raises(BadInputError):
        resolve_model(str(tmp_path / "missing" / "config.json"))
    with pytest.raises(BadInputError, match="unknown model"):
        resolve_model("not a model id")


def test_hub_fetch_uses_token_and_caches(hub: tuple[str, _Hub], tmp_path: Path) -> None:
    _, state = hub
    facts = resolve_model("acme/tiny-mistral", cache_dir=tmp_path)
    assert facts.source == "hub" and facts.hidden_size == 1024
    assert facts.checkpoint_bytes == 123_456_789
    assert {auth for _, auth in state.requests} == {f"Bearer {TOKEN}"}
    assert TOKEN not in facts.model_dump_json()
    seen = len(state.requests)
    again = resolve_model("acme/tiny-mistral", cache_dir=tmp_path, offline=True)
    assert again.hidden_size == 1024 and len(state.requests) == seen  # served from the disk cache
    resolve_model("acme/tiny-mistral", cache_dir=tmp_path)
    assert len(state.requests) == seen


def test_hub_revision_is_separate(hub: tuple[str, _Hub], tmp_path: Path) -> None:
    assert resolve_model("acme/tiny-mistral", revision="v2", cache_dir=tmp_path).num_layers == 8


def test_hub_errors_are_one_line(hub: tuple[str, _Hub], tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="not found"):
        resolve_model("acme/nothing", cache_dir=tmp_path)
    with pytest.raises(TargetError, match=r"HTTP 403") as gated:
        resolve_model("acme/gated", cache_dir=tmp_path)
    assert TOKEN not in str(gated.value)
    with pytest.raises(TargetError, match="not JSON"):
        resolve_model("acme/junk", cache_dir=tmp_path)
    with pytest.raises(BadInputError, match="revision"):
        resolve_model("acme/tiny-mistral", revision="../../etc", cache_dir=tmp_path)


def test_offline_without_cache_is_bad_input(hub: tuple[str, _Hub], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _, state = hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BadInputError, match="offline"):
        resolve_model("acme/tiny-mistral", cache_dir=tmp_path)
    assert state.requests == []
    assert resolve_model("deepseek-r1").source == "catalog"  # the catalog needs no network


def test_unreachable_hub_is_target_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("VLLM_TUNE_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(TargetError, match="cannot reach"):
        resolve_model("acme/tiny-mistral", cache_dir=tmp_path, endpoint=f"http://127.0.0.1:{port}")
