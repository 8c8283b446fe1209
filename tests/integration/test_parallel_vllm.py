"""The planner's memory model against a real vLLM (CPU) server: KV bytes per token and KV capacity."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.tiny_models import TinyModels
from support.vllm_server import VllmServer

from vllm_tune.tools.models import resolve_model
from vllm_tune.tools.parallel import Layout, PlanInput, recommend_parallelism
from vllm_tune.tools.parallel.memory import kv_bytes_per_token_per_gpu

pytestmark = pytest.mark.integration

GIB = 2**30
SINGLE = Layout(tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, enable_expert_parallel=False,
                expert_parallel_size=1, gpus_used=1)


def _kv_lines(log: str) -> tuple[float, int, int, float]:
    """(KV GiB the CPU worker was given, vLLM's KV tokens, the per-request length, its max concurrency)."""
    space = re.search(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache", log)
    size = re.search(r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: "
                     r"([\d.]+)x", log)
    assert space and size, "vLLM start-up log lacks the KV cache lines"
    return (float(space.group(1)), int(size.group(1).replace(",", "")), int(size.group(2).replace(",", "")),
            float(size.group(3)))


def _block_size(log: str) -> int:
    found = re.search(r"'block_size': (\d+)|block_size=(\d+)", log)
    return int(next(g for g in found.groups() if g)) if found else 128


@pytest.mark.parametrize("which", ["vllm_server", "vllm_moe_server"])
def test_kv_capacity_matches_vllm(which: str, request: pytest.FixtureRequest, tiny_models: TinyModels) -> None:
    server: VllmServer = request.getfixturevalue(which)
    model = tiny_models.llama if which == "vllm_server" else tiny_models.mixtral
    facts = resolve_model(str(model))
    if which == "vllm_moe_server":
        assert facts.moe is not None and facts.moe.num_experts == 8
    space_gib, tokens, per_request, concurrency = _kv_lines(server.log_text())
    per_token = kv_bytes_per_token_per_gpu(facts, SINGLE, "auto")
    block = _block_size(server.log_text())
    # vLLM allocates whole blocks of `block` tokens out of the KV space it was given.
    expected = int(space_gib * GIB // (per_token * block)) * block
    assert tokens == expected, (tokens, expected, per_token)
    assert concurrency == pytest.approx(expected / per_request, rel=0.01)


def test_resolve_model_reads_tiny_model_dirs(tiny_models: TinyModels) -> None:
    llama = resolve_model(str(tiny_models.llama))
    assert (llama.source, llama.architecture, llama.num_layers, llama.num_kv_heads) == ("local", "LlamaForCausalLM",
                                                                                         2, 2)
    assert llama.checkpoint_bytes_source == "files"
    # bf16 weights: the safetensors file is two bytes per parameter plus a small header
    assert llama.checkpoint_bytes == pytest.approx(2 * llama.params_total, rel=0.02)
    mixtral = resolve_model(str(tiny_models.mixtral / "config.json"))
    assert mixtral.moe is not None and (mixtral.moe.num_experts, mixtral.moe.top_k) == (8, 2)
    assert mixtral.checkpoint_bytes == pytest.approx(2 * mixtral.params_total, rel=0.02)


def test_plan_for_a_local_model_uses_its_path(tiny_models: TinyModels) -> None:
    out = recommend_parallelism(PlanInput(model=str(tiny_models.mixtral), gpu="H100", gpus=2, top=50))
    assert out.feasible and out.model.source == "local"
    assert all(c.command.startswith(f"vllm serve {tiny_models.mixtral} ") for c in out.candidates)
    assert any(c.enable_expert_parallel for c in out.candidates)


def test_multi_node_commands_parse_with_the_real_vllm_parser(tmp_path: Path) -> None:
    import shlex

    from support.vllm_parser import parse

    cands = [recommend_parallelism(PlanInput(model=model, gpu=gpu, gpus=16, goal=goal, offline=True,
                                             vllm_version="0.32.0", head_address="10.9.8.7")).candidates[0]
             for model, gpu, goal in (("deepseek-v3", "H200", "throughput"), ("llama-3.1-405b", "H100", "latency"))]
    assert [c.launch for c in cands] == ["multi-node-dp", "multi-node-mp"]
    nodes = [n for c in cands for n in c.node_commands]
    parsed = parse([shlex.split(n.command)[2:] for n in nodes], tmp_path)
    assert all(p is not None for p in parsed), [n.command for n, p in zip(nodes, parsed, strict=True) if p is None]
    dp_nodes, mp_nodes = parsed[:len(cands[0].node_commands)], parsed[len(cands[0].node_commands):]
    dp = cands[0].data_parallel_size
    ranks: list[int] = []
    for node, got in zip(cands[0].node_commands, dp_nodes, strict=True):
        assert got["model_tag"] == "deepseek-ai/DeepSeek-V3" and got["data_parallel_size"] == dp
        assert got["headless"] is (node.role == "worker") and got["enable_expert_parallel"] is True
        assert got["data_parallel_address"] == "10.9.8.7" and got["data_parallel_rpc_port"] == 29550
        start = got["data_parallel_start_rank"] or 0
        ranks.extend(range(start, start + got["data_parallel_size_local"]))
    assert sorted(ranks) == list(range(dp))
    for rank, got in enumerate(mp_nodes):
        assert (got["nnodes"], got["node_rank"], got["master_addr"]) == (len(mp_nodes), rank, "10.9.8.7")
        assert got["headless"] is (rank > 0) and got["tensor_parallel_size"] * got["pipeline_parallel_size"] == 16
