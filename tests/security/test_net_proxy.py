"""No request (with its API key or HF token) goes to an environment proxy unless VLLM_TUNE_USE_PROXY=1.

Issue 18 item 3: with HTTP_PROXY set, loopback /tokenize, /v1/models, /version, /metrics, hub reads and
Prometheus queries all went through the proxy carrying `Bearer <key>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from netfakes import Net, Proxy, Served, reply

from vllm_tune.tools.bench.api import RunBenchmarkInput, run_benchmark
from vllm_tune.tools.errors import TargetError, VllmTuneError
from vllm_tune.tools.models.hub import fetch_hub_files
from vllm_tune.tools.net import TargetPolicy, fetch_text, http_client

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256,
          "intermediate_size": 128, "torch_dtype": "bfloat16"}


def _set_proxy(monkeypatch: pytest.MonkeyPatch, proxy: Proxy) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(var, proxy.url)


def _vllm_like(req: Any) -> None:
    if req.path.startswith("/metrics"):
        reply(req, 200, b"vllm:num_requests_running 0\n", "text/plain")
    elif req.path.startswith("/v1/models"):
        reply(req, 200, json.dumps({"data": [{"id": "m", "max_model_len": 64}]}).encode())
    else:
        reply(req, 404, b"{}")


def test_loopback_target_bypasses_an_environment_proxy(net: Net, serve: Any, proxy: Proxy,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-proxy-must-not-see")
    _set_proxy(monkeypatch, proxy)
    served: Served = serve(_vllm_like)
    with http_client(TargetPolicy.of([])) as client:
        assert "num_requests_running" in fetch_text(client, f"{served.url}/metrics")
        fetch_text(client, f"{served.url}/v1/models")
    assert proxy.contacts == []
    assert served.seen[0]["authorization"] == "Bearer sk-proxy-must-not-see"  # the key went to the target only


def test_prometheus_client_bypasses_the_proxy(net: Net, serve: Any, proxy: Proxy,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _set_proxy(monkeypatch, proxy)
    served: Served = serve(lambda req: reply(req, 200, b'{"status": "success", "data": {"result": []}}'))
    with http_client(TargetPolicy.of([]), send_api_key=False) as client:
        assert client.get(f"{served.url}/api/v1/query", params={"query": "up"}).status_code == 200
    assert proxy.contacts == []


def test_benchmark_control_client_bypasses_the_proxy(net: Net, serve: Any, proxy: Proxy, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-proxy-must-not-see")
    _set_proxy(monkeypatch, proxy)
    served: Served = serve(_vllm_like)  # no /tokenize and no completions: the run fails after the probe
    req = RunBenchmarkInput(url=served.url, concurrency=1, num_prompts=1, warmup_requests=0, input_len=8,
                            output_len=4, save_result=str(tmp_path), request_timeout_s=5)
    with contextlib.suppress(VllmTuneError):
        asyncio.run(run_benchmark(req, policy=TargetPolicy.of([])))
    assert proxy.contacts == []
    assert any(s["path"] == "/v1/models" for s in served.seen)


def test_hub_token_is_not_sent_to_a_proxy(net: Net, serve: Any, proxy: Proxy, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_proxy_must_not_see")
    _set_proxy(monkeypatch, proxy)
    served: Served = serve(lambda req: reply(req, 200, json.dumps(CONFIG).encode()) if "config.json" in req.path
                           else reply(req, 404, b"{}"))
    config, _index = fetch_hub_files("acme/tiny", cache_dir=tmp_path, endpoint=served.url)
    assert config["hidden_size"] == 64
    assert proxy.contacts == []
    assert served.seen[0]["authorization"] == "Bearer hf_proxy_must_not_see"


def test_operator_can_opt_in_to_the_proxy(net: Net, serve: Any, proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    _set_proxy(monkeypatch, proxy)
    monkeypatch.setenv("VLLM_TUNE_USE_PROXY", "1")
    served: Served = serve(_vllm_like)
    with http_client(TargetPolicy.of([])) as client, pytest.raises(TargetError, match="HTTP 502"):
        fetch_text(client, f"{served.url}/metrics")
    assert len(proxy.contacts) == 1 and proxy.contacts[0].startswith(b"GET http://127.0.0.1:")
    assert served.seen == []


def test_opted_in_proxy_still_never_carries_a_request_the_policy_refuses(net: Net, proxy: Proxy,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _set_proxy(monkeypatch, proxy)
    monkeypatch.setenv("VLLM_TUNE_USE_PROXY", "1")
    net.resolve("vllm.internal", "169.254.169.254")
    with http_client(TargetPolicy.of(["vllm.internal"])) as client, pytest.raises(Exception, match="by address"):
        fetch_text(client, "http://vllm.internal:8000/metrics")
    assert proxy.contacts == []
