"""Hub reads follow only same-origin redirects, send the token only to the hub, and cache only a real config.

Issue 18 (low): hub reads followed redirects anywhere (follow_redirects=True) and cached the redirect's
body as the model's config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from netfakes import Net, Served, reply

from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.models.hub import fetch_hub_files

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256,
          "intermediate_size": 128, "torch_dtype": "bfloat16"}


def test_redirect_to_another_host_is_not_followed(net: Net, serve: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_stays_home")
    net.resolve("cdn.evil.test", "169.254.169.254")
    served: Served = serve(lambda req: reply(req, 302, b"", headers={
        "Location": "http://cdn.evil.test/latest/meta-data/iam"}))
    with pytest.raises(TargetError, match="another host"):
        fetch_hub_files("acme/tiny", cache_dir=tmp_path, endpoint=served.url)
    assert not net.attempted("169.254.169.254")
    assert "cdn.evil.test" not in net.lookups
    assert not list(tmp_path.rglob("*.json"))


def test_redirect_to_a_loopback_port_of_a_remote_hub_is_not_followed(net: Net, serve: Any, tmp_path: Path) -> None:
    other: Served = serve(lambda req: reply(req, 200, json.dumps(CONFIG).encode()))
    served: Served = serve(lambda req: reply(req, 307, b"", headers={"Location": f"{other.url}/config.json"}))
    with pytest.raises(TargetError, match="another host"):
        fetch_hub_files("acme/tiny", cache_dir=tmp_path, endpoint=served.url)
    assert other.seen == []


def test_same_origin_redirect_is_followed_with_the_token(net: Net, serve: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_same_origin")

    def handler(req: Any) -> None:
        if req.path.startswith("/acme/tiny/resolve/main/config.json"):
            reply(req, 307, b"", headers={"Location": "/api/resolve-cache/models/acme/tiny/abc/config.json"})
        elif req.path.startswith("/api/resolve-cache/") and req.path.endswith("config.json"):
            reply(req, 200, json.dumps(CONFIG).encode())
        else:
            reply(req, 404, b"{}")

    served: Served = serve(handler)
    config, index = fetch_hub_files("acme/tiny", cache_dir=tmp_path, endpoint=served.url)
    assert config["hidden_size"] == 64 and index is None
    hop = next(s for s in served.seen if s["path"].startswith("/api/resolve-cache/"))
    assert hop["authorization"] == "Bearer hf_same_origin"
    assert list(tmp_path.rglob("config.json"))


def test_a_json_answer_that_is_no_model_config_is_not_cached(net: Net, serve: Any, tmp_path: Path) -> None:
    served: Served = serve(lambda req: reply(req, 200, b'{"error": "Repository Not Found"}')
                           if "config.json" in req.path else reply(req, 404, b"{}"))
    with pytest.raises(BadInputError):
        fetch_hub_files("acme/tiny", cache_dir=tmp_path, endpoint=served.url)
    assert not list(tmp_path.rglob("config.json"))


def test_too_many_same_origin_redirects_end(net: Net, serve: Any, tmp_path: Path) -> None:
    served: Served = serve(lambda req: reply(req, 302, b"", headers={"Location": req.path + "x"}))
    with pytest.raises(TargetError, match="more than"):
        fetch_hub_files("acme/tiny", cache_dir=tmp_path, endpoint=served.url)
