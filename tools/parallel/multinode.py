"""Per-node launch commands for a layout whose one copy needs more GPUs than a node has.

Three launches, chosen by what the layout needs and what the target vLLM version accepts:
- DP (+EP) with each DP rank inside a node: vLLM's data-parallel launch; the head runs the API server and its
  local DP ranks, the other nodes run `--headless` engines starting at their first DP rank
  (parallelism.multi-node-dp-launch).
- TP/PP spanning nodes: the multiprocessing launch with --nnodes/--node-rank/--master-addr, `--headless` on
  every node but the head (parallelism.multi-node-mp-launch).
- Versions without --nnodes: a Ray cluster with --distributed-executor-backend ray on the head
  (parallelism.multi-node-ray-launch), each node exporting VLLM_HOST_IP (env.vllm-host-ip).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field

from vllm_tune.tools.parallel.command import Args, flag_valid, render_command
from vllm_tune.tools.parallel.io import LaunchKind, Layout, NodeCommand

HEAD_PLACEHOLDER = "HEAD_NODE_IP"
# Any free port works; it must be the same on every node and reachable from them. vLLM's own default is 29550
# (flag.data-parallel-rpc-port); passing it explicitly makes the firewall rule obvious.
DP_RPC_PORT = 29550
RAY_PORT = 6379

DP_LAUNCH = "parallelism.multi-node-dp-launch"
MP_LAUNCH = "parallelism.multi-node-mp-launch"
RAY_LAUNCH = "parallelism.multi-node-ray-launch"
HOST_IP_ENV = "env.vllm-host-ip"
ALL2ALL = "flag.all2all-backend"
NCCL_CHECK = "distributed.check-gdrdma"

DP_FLAGS = ("--data-parallel-size-local", "--data-parallel-start-rank", "--data-parallel-address",
            "--data-parallel-rpc-port", "--headless")
MP_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--headless")


@dataclass
class Launch:
    kind: LaunchKind
    nodes: list[NodeCommand]
    notes: list[tuple[str, str]] = field(default_factory=list)  # (knowledge id, why): reasons
    cautions: list[tuple[str, str]] = field(default_factory=list)  # (knowledge id, why): warnings
    dropped: list[str] = field(default_factory=list)


def _all_valid(flags: tuple[str, ...], version: str) -> bool:
    return all(flag_valid(flag, version) for flag in flags)


def _node_address(node: int, head: str) -> str:
    return head if node == 0 else f"NODE{node}_IP"


def _render(model: str, args: Args, version: str, launch: Launch) -> str:
    command, dropped = render_command(model, args, version)
    launch.dropped.extend(d for d in dropped if d not in launch.dropped)
    return command


def _dp_launch(model: str, layout: Layout, base: Args, per_node: int, version: str, head: str) -> Launch:
    per_rank = layout.tensor_parallel_size * layout.pipeline_parallel_size
    local = per_node // per_rank
    dp = layout.data_parallel_size
    launch = Launch("multi-node-dp", [])
    for node in range(math.ceil(dp / local)):
        ranks = list(range(node * local, min(dp, (node + 1) * local)))
        args = list(base)
        if node > 0:
            args.append(("--headless", None))
        args.append(("--data-parallel-size-local", str(len(ranks))))
        if node > 0:
            args.append(("--data-parallel-start-rank", str(ranks[0])))
        args += [("--data-parallel-address", head), ("--data-parallel-rpc-port", str(DP_RPC_PORT))]
        launch.nodes.append(NodeCommand(node=node, role="head" if node == 0 else "worker", gpus=len(ranks) * per_rank,
                                        command=_render(model, args, version, launch), data_parallel_ranks=ranks))
    launch.notes.append((DP_LAUNCH, f"DP={dp} over {len(launch.nodes)} nodes, {local} DP rank(s) per node; the head "
                                    f"serves the API, the others run --headless engines; open port {DP_RPC_PORT} "
                                    "between the nodes"))
    return launch


def _mp_launch(model: str, base: Args, nodes: int, per_node: int, version: str, head: str) -> Launch:
    launch = Launch("multi-node-mp", [])
    for node in range(nodes):
        args = [*base, ("--nnodes", str(nodes)), ("--node-rank", str(node)), ("--master-addr", head)]
        if node > 0:
            args.append(("--headless", None))
        launch.nodes.append(NodeCommand(node=node, role="head" if node == 0 else "worker", gpus=per_node,
                                        command=_render(model, args, version, launch)))
    launch.notes.append((MP_LAUNCH, f"one copy spans {nodes} nodes of {per_node} GPUs: start the same command on "
                                    "each with its --node-rank; only the head serves the API"))
    return launch


def _ray_launch(model: str, base: Args, nodes: int, per_node: int, version: str, head: str) -> Launch:
    launch = Launch("multi-node-ray", [])
    serve = _render(model, [*base, ("--distributed-executor-backend", "ray")], version, launch)
    for node in range(nodes):
        address = _node_address(node, head)
        env = {"VLLM_HOST_IP": address}
        if node == 0:
            launch.nodes.append(NodeCommand(node=0, role="head", gpus=per_node, env=env, command=serve,
                                            prepare=[f"ray start --head --port={RAY_PORT} "
                                                     f"--node-ip-address={shlex.quote(address)}"]))
        else:
            launch.nodes.append(NodeCommand(
                node=node, role="worker", gpus=per_node, env=env,
                command=f"ray start --block --address={shlex.quote(f'{head}:{RAY_PORT}')} "
                        f"--node-ip-address={shlex.quote(address)}"))
    launch.notes.append((RAY_LAUNCH, f"vLLM {version} has no --nnodes launch: join all {nodes} nodes into one Ray "
                                     "cluster, then start vllm serve on the head only"))
    launch.notes.append((HOST_IP_ENV, "each node sets VLLM_HOST_IP to its own address (NODEi_IP placeholders)"))
    return launch


def plan_launch(model: str, layout: Layout, base: Args, *, gpus_per_node: int, vllm_version: str,
                head_address: str | None) -> Launch | None:
    """Per-node commands for one copy of the layout; None when the copy fits one node."""
    per_rank = layout.tensor_parallel_size * layout.pipeline_parallel_size
    world = per_rank * layout.data_parallel_size
    if world <= gpus_per_node:
        return None
    head = head_address or HEAD_PLACEHOLDER
    nodes = math.ceil(world / gpus_per_node)
    if per_rank <= gpus_per_node and layout.data_parallel_size > 1 and _all_valid(DP_FLAGS, vllm_version):
        launch = _dp_launch(model, layout, base, gpus_per_node, vllm_version, head)
    elif (world % nodes == 0 and (layout.data_parallel_size == 1 or nodes % layout.data_parallel_size == 0)
          and _all_valid(MP_FLAGS, vllm_version)):
        # vLLM requires --nnodes to divide the world size and, with DP, the DP size to divide --nnodes.
        launch = _mp_launch(model, base, nodes, world // nodes, vllm_version, head)
    elif layout.data_parallel_size == 1 and world % nodes == 0 and flag_valid("--distributed-executor-backend",
                                                                               vllm_version):
        launch = _ray_launch(model, base, nodes, world // nodes, vllm_version, head)
    else:
        why = f"no per-node commands for this split over {nodes} nodes in vLLM {vllm_version}; start it by hand"
        return Launch("multi-node-manual", [], cautions=[(MP_LAUNCH, why)])
    # NCCL needs no variables on a healthy fabric (distributed.nccl-leave-defaults), so none are set; a
    # silent fall-back to TCP is the common multi-node failure and only shows in NCCL's own log.
    launch.cautions.append((NCCL_CHECK, "no NCCL variables are set; boot once with NCCL_DEBUG=INFO and confirm the "
                                        "transport lines say NET/IB (not NET/Socket) between the nodes"))
    if layout.enable_expert_parallel:
        launch.cautions.append((ALL2ALL, "expert all-to-all crosses nodes; the default --all2all-backend "
                                      "(allgather_reducescatter) is kept, DeepEP backends need DeepEP installed, and "
                                      "there is no VLLM_ALL2ALL_BACKEND variable to set"))
    return launch
