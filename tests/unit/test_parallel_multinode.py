"""Per-node launch commands of multi-node layouts: flags valid for the target vLLM, DP ranks, head address, env."""

from __future__ import annotations

import shlex

import pytest
from pydantic import ValidationError

from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.models.catalog import catalog_model_ids
from vllm_tune.tools.parallel import (
    Candidate,
    Layout,
    MemoryBreakdown,
    NodeCommand,
    PlanInput,
    recommend_parallelism,
)
from vllm_tune.tools.parallel.command import FLAG_IDS, flag_valid, serve_args
from vllm_tune.tools.parallel.multinode import DP_RPC_PORT, HEAD_PLACEHOLDER, plan_launch


def layout(tp: int, pp: int = 1, dp: int = 1, ep: bool = False) -> Layout:
    return Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp, enable_expert_parallel=ep,
                  expert_parallel_size=tp * dp if ep else 1, gpus_used=tp * pp * dp)


def options(command: str) -> dict[str, str | None]:
    """The `vllm serve` options of a command line (flag -> value, None for switches)."""
    words = shlex.split(command)
    assert words[:2] == ["vllm", "serve"], command
    out: dict[str, str | None] = {}
    rest = words[3:]
    for i, word in enumerate(rest):
        if word.startswith("--"):
            nxt = rest[i + 1] if i + 1 < len(rest) else None
            assert word not in out, f"{word} given twice in {command}"
            out[word] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def assert_flags_valid(command: str, version: str) -> None:
    for flag in options(command):
        assert flag in FLAG_IDS, f"{flag} has no knowledge-base flag entry"
        assert flag_valid(flag, version), f"{flag} is not valid for vLLM {version}"


def check_dp_nodes(cand: Candidate, head: str) -> None:
    dp = cand.data_parallel_size
    ranks = [r for n in cand.node_commands for r in n.data_parallel_ranks]
    assert sorted(ranks) == list(range(dp)) and len(ranks) == dp
    per_rank = cand.tensor_parallel_size * cand.pipeline_parallel_size
    for n in cand.node_commands:
        opts = options(n.command)
        assert opts["--data-parallel-size"] == str(dp)
        assert opts["--data-parallel-size-local"] == str(len(n.data_parallel_ranks))
        assert opts["--data-parallel-address"] == head
        assert opts["--data-parallel-rpc-port"] == str(DP_RPC_PORT)
        assert n.gpus == len(n.data_parallel_ranks) * per_rank
        if n.role == "head":
            assert n.node == 0 and n.data_parallel_ranks[0] == 0
            assert "--headless" not in opts and "--data-parallel-start-rank" not in opts
        else:
            assert "--headless" in opts and opts["--data-parallel-start-rank"] == str(n.data_parallel_ranks[0])
        assert n.env == {} and n.prepare == []


def test_deepseek_v3_dp_ep_over_two_nodes() -> None:
    out = recommend_parallelism(PlanInput(model="deepseek-v3", gpu="H200", gpus=16, goal="throughput", offline=True,
                                          head_address="10.1.2.3"))
    best = out.candidates[0]
    assert best.enable_expert_parallel and best.data_parallel_size > 1 and best.launch == "multi-node-dp"
    assert [n.role for n in best.node_commands] == ["head", "worker"]
    assert sum(n.gpus for n in best.node_commands) == best.gpus_used == 16
    check_dp_nodes(best, "10.1.2.3")
    assert best.command == best.node_commands[0].command and best.env == {}
    ids = {r.id for r in best.reasons} | {w.id for w in best.warnings}
    assert {"parallelism.multi-node-dp-launch", "flag.all2all-backend", "distributed.check-gdrdma"} <= ids
    assert all("VLLM_ALL2ALL_BACKEND" not in n.command and "VLLM_ALL2ALL_BACKEND" not in n.env
               for n in best.node_commands)


def test_uneven_dp_split_covers_every_rank_once() -> None:
    lay = layout(2, dp=6, ep=True)
    base = serve_args(lay, max_model_len=4096, kv_cache_dtype="auto", quantization=None, gpu_memory_utilization=0.9)
    launch = plan_launch("org/moe", lay, base, gpus_per_node=8, vllm_version="0.34.0", head_address=None)
    assert launch is not None and launch.kind == "multi-node-dp"
    assert [n.data_parallel_ranks for n in launch.nodes] == [[0, 1, 2, 3], [4, 5]]
    cand = Candidate(**lay.model_dump(), rank=1, score=1.0, command=launch.nodes[0].command,
                     launch=launch.kind, node_commands=launch.nodes, memory=_dummy_memory(), estimate=None, reasons=[])
    check_dp_nodes(cand, HEAD_PLACEHOLDER)


def test_tp_pp_across_nodes_uses_nnodes_launch() -> None:
    out = recommend_parallelism(PlanInput(model="llama-3.1-405b", gpu="H100", gpus=16, goal="latency", offline=True))
    best = out.candidates[0]
    assert (best.tensor_parallel_size, best.pipeline_parallel_size, best.launch) == (8, 2, "multi-node-mp")
    nodes = best.node_commands
    assert [n.node for n in nodes] == [0, 1] and sum(n.gpus for n in nodes) == 16
    for n in nodes:
        opts = options(n.command)
        assert opts["--nnodes"] == "2" and opts["--node-rank"] == str(n.node)
        assert opts["--master-addr"] == HEAD_PLACEHOLDER
        assert ("--headless" in opts) == (n.role == "worker")
        assert "--distributed-executor-backend" not in opts  # --nnodes > 1 selects mp on CUDA by itself
        assert n.env == {} and n.data_parallel_ranks == []
        assert_flags_valid(n.command, "0.34.0")
    assert best.env == {} and best.command == nodes[0].command


def test_versions_without_nnodes_get_a_ray_cluster_with_host_ip_per_node() -> None:
    out = recommend_parallelism(PlanInput(model="llama-3.1-405b", gpu="H100", gpus=16, goal="latency", offline=True,
                                          vllm_version="0.20.0", head_address="head.example"))
    best = out.candidates[0]
    assert best.launch == "multi-node-ray"
    head, worker = best.node_commands
    assert head.env == {"VLLM_HOST_IP": "head.example"} == best.env
    assert worker.env["VLLM_HOST_IP"] not in ("", "head.example")
    assert head.prepare == ["ray start --head --port=6379 --node-ip-address=head.example"]
    assert options(head.command)["--distributed-executor-backend"] == "ray"
    assert "--nnodes" not in head.command and "--address=head.example:6379" in worker.command
    assert_flags_valid(head.command, "0.20.0")
    assert "env.vllm-host-ip" in {r.id for r in best.reasons}
    assert load_knowledge().get("env.vllm-host-ip").env is not None


def test_dp_across_nodes_without_the_flags_is_left_to_the_operator() -> None:
    out = recommend_parallelism(PlanInput(model="deepseek-v3", gpu="H200", gpus=16, goal="throughput", offline=True,
                                          vllm_version="0.20.0", top=50))
    spanning = [c for c in out.candidates if c.data_parallel_size > 1]
    assert spanning
    for cand in spanning:
        assert cand.launch == "multi-node-manual" and cand.node_commands == []
        assert "parallelism.multi-node-mp-launch" in {w.id for w in cand.warnings}
        assert "--data-parallel-size-local" not in cand.command


def test_single_node_layouts_have_no_node_commands_and_no_env() -> None:
    out = recommend_parallelism(PlanInput(model="deepseek-r1", gpu="H200", gpus=8, goal="throughput", offline=True,
                                          top=50))
    assert out.candidates
    for cand in out.candidates:
        assert cand.launch == "single-node" and cand.node_commands == [] and cand.env == {}
        assert "distributed.check-gdrdma" not in {w.id for w in cand.warnings}
        assert "--headless" not in cand.command and "--nnodes" not in cand.command


@pytest.mark.parametrize("version", ["0.32.0", "0.34.0"])
@pytest.mark.parametrize("model", catalog_model_ids())
def test_every_multi_node_command_is_valid(model: str, version: str) -> None:
    out = recommend_parallelism(PlanInput(model=model, gpu="H100", gpus=32, goal="throughput", offline=True, top=50,
                                          vllm_version=version))
    for cand in out.candidates:
        nodes: list[NodeCommand] = cand.node_commands
        per_copy = cand.gpus_used // cand.replicas
        assert bool(nodes) == (per_copy > out.gpus_per_node)
        if not nodes:
            continue
        assert sum(n.gpus for n in nodes) == per_copy and all(n.gpus <= out.gpus_per_node for n in nodes)
        assert [n.node for n in nodes] == list(range(len(nodes))) and nodes[0].role == "head"
        assert all(n.role == "worker" for n in nodes[1:])
        for n in nodes:
            assert_flags_valid(n.command, version)
        if cand.launch == "multi-node-dp":
            check_dp_nodes(cand, HEAD_PLACEHOLDER)
        else:
            assert cand.launch == "multi-node-mp"
            assert {options(n.command)["--master-addr"] for n in nodes} == {HEAD_PLACEHOLDER}


@pytest.mark.parametrize("bad", ["10.0.0.1; rm -rf /", "$(id)", "a b", ""])
def test_head_address_must_be_a_plain_host(bad: str) -> None:
    with pytest.raises(ValidationError):
        PlanInput(model="llama-3.1-8b", gpu="H100", gpus=16, head_address=bad)


def _dummy_memory() -> MemoryBreakdown:
    return MemoryBreakdown(usable_gib=1, weights_gib=0.5, activation_gib=0.1, overhead_gib=0.1, kv_cache_gib=0.3,
                           kv_bytes_per_token=1.0, kv_tokens_per_replica=10, max_concurrency_at_max_len=1.0,
                           max_concurrency_at_workload=1.0)


def test_cli_renders_one_command_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    from vllm_tune.cli.main import main

    code = main(["plan", "deepseek-v3", "--gpu", "H200", "--gpus", "16", "--goal", "throughput", "--top", "1",
                 "--offline", "--head-address", "10.0.0.5"])
    out = capsys.readouterr().out
    assert code == 0
    assert "multi-node-dp: 2 nodes, one command each" in out
    assert "node 0 (head, 8 GPUs, DP ranks 0-" in out and "node 1 (worker, 8 GPUs, DP ranks " in out
    worker_line = next(line for line in out.splitlines() if "--headless" in line)
    assert "--data-parallel-address 10.0.0.5" in worker_line and "--data-parallel-start-rank" in worker_line
    assert main(["plan", "llama-3.1-405b", "--gpu", "H100", "--gpus", "16", "--goal", "latency", "--top", "1",
                 "--offline", "--vllm-version", "0.20.0"]) == 0
    ray = capsys.readouterr().out
    assert "VLLM_HOST_IP=HEAD_NODE_IP ray start --head" in ray and "VLLM_HOST_IP=NODE1_IP ray start --block" in ray
