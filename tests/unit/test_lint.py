"""Config lint: reading commands like vLLM's parser does, and firing the knowledge base's pitfalls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_tune.cli.main import main as cli_main
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.lint.api import LintInput, LintOutput, lint_config
from vllm_tune.tools.lint.flags import load_table, pick_version
from vllm_tune.tools.lint.parse import read_serve_config
from vllm_tune.tools.lint.signals import LINT_SIGNAL_DOCS


def lint(command: str, version: str = "0.34.0", **kw: object) -> LintOutput:
    return lint_config(LintInput(command=command, vllm_version=version, offline=True, **kw))  # type: ignore[arg-type]


def problems(out: LintOutput) -> dict[str, str]:
    return {p.option: p.problem for p in out.option_problems}


def finding_ids(out: LintOutput) -> set[str]:
    return {f.id for f in out.findings}


@pytest.mark.parametrize(("token", "canonical", "how"), [
    ("--max-num-seqs", "--max-num-seqs", "exact"),
    ("--max_num_seqs", "--max-num-seqs", "underscore"),
    ("--max-num-seq", "--max-num-seqs", "abbreviation"),
    ("--no-enable-prefix-caching", "--no-enable-prefix-caching", "hidden"),
    ("--compilation-config.mode", "--compilation-config", "dotted"),
    ("-O3", "--optimization-level", "attached"),
    ("-tp", "-tp", "exact"),
    ("-n2", "-n", "attached"),
])
def test_options_resolve_like_the_parser(token: str, canonical: str, how: str) -> None:
    res = load_table("0.34.0").resolve(token)
    assert res is not None and (res.canonical, res.how) == (canonical, how)


def test_ambiguous_prefix_and_typos_do_not_resolve() -> None:
    table = load_table("0.34.0")
    assert table.resolve("--max-num") is None  # --max-num-seqs, --max-num-batched-tokens, ...
    assert table.resolve("--tensor-paralel-size") is None
    assert table.resolve("-tp2") is None  # argparse glues values to one-letter short options only
    assert table.suggest("--tensor-paralel-size") == "--tensor-parallel-size"


def test_switch_spellings_store_what_the_parser_stores() -> None:
    new, old = load_table("0.34.0"), load_table("0.32.0")
    assert new.options["--disable-prefix-caching"].sets == {"--disable-prefix-caching": False,
                                                           "--enable-prefix-caching": True,
                                                           "--no-enable-prefix-caching": False}
    assert "--disable-prefix-caching" not in old.options and "--no-enable-prefix-caching" in old.options


def test_version_without_a_table_uses_the_nearest_older_one() -> None:
    assert pick_version("0.33.1") == ("0.32.0", pick_version("0.33.1")[1])
    assert "0.32.0" in (pick_version("0.33.1")[1] or "")
    assert pick_version(None) == ("0.34.0", None)
    assert pick_version("0.35.0")[0] == "0.34.0"


def test_command_forms_env_prefix_docker_and_module() -> None:
    cfg = read_serve_config(command="HF_HUB_OFFLINE=1 CUDA_VISIBLE_DEVICES=0,1 vllm serve org/m -tp 2 \\\n --port 9000",
                            config_yaml=None, config_file=None, env={}, version="0.34.0")
    assert cfg.model == "org/m" and cfg.get("tensor_parallel_size") == "2" and cfg.get("port") == "9000"
    assert cfg.env == {"HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
    docker = read_serve_config(command="docker run --gpus all -e VLLM_PORT=1 vllm/vllm-openai:v0.34.0 --model org/m",
                               config_yaml=None, config_file=None, env={}, version="0.34.0")
    assert docker.model == "org/m" and docker.env == {"VLLM_PORT": "1"}
    module = read_serve_config(command="python -m vllm.entrypoints.openai.api_server --model org/m --enforce-eager",
                               config_yaml=None, config_file=None, env={}, version="0.32.0")
    assert module.model == "org/m" and module.get("enforce_eager") is True
    with pytest.raises(BadInputError, match="no `vllm serve`"):
        read_serve_config(command="python train.py", config_yaml=None, config_file=None, env={}, version="0.34.0")


def test_command_line_wins_over_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text("max-num-seqs: 32\nenable_prefix_caching: false\ngpu_memory_utilization: 0.8\n")
    cfg = read_serve_config(command=f"vllm serve org/m --config {path} --max-num-seqs 64", config_yaml=None,
                            config_file=None, env={}, version="0.34.0")
    assert cfg.get("max_num_seqs") == "64"
    assert cfg.get("enable_prefix_caching") is False and cfg.get("gpu_memory_utilization") == 0.8
    assert cfg.values["gpu_memory_utilization"].source == "config file"


def test_unreadable_named_config_is_a_note_but_an_explicit_one_is_an_error(tmp_path: Path) -> None:
    out = lint(f"vllm serve org/m --config {tmp_path / 'missing.yaml'}")
    assert any("could not be read" in n for n in out.notes)
    with pytest.raises(BadInputError, match="cannot read"):
        lint_config(LintInput(config_file=str(tmp_path / "missing.yaml")))
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(BadInputError, match="mapping"):
        lint_config(LintInput(config_file=str(bad)))


def test_option_problems_say_what_vllm_would_do() -> None:
    out = lint("vllm serve org/m --bogus 3 --max-num-seq 8 --kv-cache-dtype fp9 --port", version="0.32.0")
    assert problems(out) == {"--bogus": "unknown", "--max-num-seq": "abbreviation", "--kv-cache-dtype": "bad-choice",
                             "--port": "missing-value"}
    assert out.verdict.startswith("will not start")
    typo = lint("vllm serve org/m --tensor-paralel-size 2")
    assert typo.option_problems[0].suggestion == "--tensor-parallel-size"


def test_options_of_another_release_get_the_portable_spelling() -> None:
    old = lint("vllm serve org/m --disable-prefix-caching", version="0.32.0")
    (p,) = old.option_problems
    assert (p.problem, p.severity, p.suggestion) == ("other-release", "critical", "--no-enable-prefix-caching")
    new = lint("vllm serve org/m --no-enable-prefix-caching", version="0.34.0")
    (hidden,) = new.option_problems
    assert (hidden.problem, hidden.suggestion) == ("hidden-spelling", "--disable-prefix-caching")
    assert "change.serve-switches-enable-disable" in hidden.knowledge_ids


def test_environment_names_are_checked_against_the_release() -> None:
    out = lint("VLLM_MARLIN_INPUT_DTYPE=int8 VLLM_LOGGING_LEVL=DEBUG vllm serve org/m")
    got = {p.option: (p.problem, p.severity, p.suggestion) for p in out.option_problems}
    assert got["VLLM_MARLIN_INPUT_DTYPE"][:2] == ("removed-env", "critical")
    assert got["VLLM_LOGGING_LEVL"] == ("unknown-env", "warning", "VLLM_LOGGING_LEVEL")
    older = lint("VLLM_MARLIN_INPUT_DTYPE=int8 vllm serve org/m", version="0.32.0")
    assert "VLLM_MARLIN_INPUT_DTYPE" not in {p.option for p in older.option_problems if p.problem == "removed-env"}


def test_model_pitfalls_fire_from_the_catalog() -> None:
    heads = lint("vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 3")
    assert "pitfall.tp-not-dividing-heads" in finding_ids(heads)
    assert "pitfall.tp-not-dividing-heads" not in finding_ids(lint("vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 4"))
    fp8 = lint("vllm serve Qwen/Qwen3-235B-A22B-FP8 -tp 8")
    (f,) = [f for f in fp8.findings if f.id == "pitfall.fp8-block-tp-cap"]
    assert f.severity == "critical" and "1536/8 not a multiple" in (f.evidence[0].how or "")
    # expert parallelism keeps each expert whole, and TP4 splits 1536 into 384 = 3 x 128
    assert "pitfall.fp8-block-tp-cap" not in finding_ids(lint("vllm serve Qwen/Qwen3-235B-A22B-FP8 -tp 8 -ep"))
    assert "pitfall.fp8-block-tp-cap" not in finding_ids(lint("vllm serve Qwen/Qwen3-235B-A22B-FP8 -tp 4"))


def test_batched_tokens_rule_needs_chunked_prefill_off() -> None:
    cmd = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 --max-num-batched-tokens 4096"
    assert "pitfall.batched-tokens-below-max-model-len" not in finding_ids(lint(cmd))
    out = lint(cmd + " --no-enable-chunked-prefill")
    (f,) = [f for f in out.findings if f.id == "pitfall.batched-tokens-below-max-model-len"]
    assert f.severity == "critical" and {e.signal: e.value for e in f.evidence}["batched_tokens_over_max_model_len"] \
        == pytest.approx(0.5)


def test_ray_on_one_node_but_not_across_nodes() -> None:
    one = lint("vllm serve org/m -tp 8 --distributed-executor-backend ray")
    assert "distributed.ray-on-single-node" in finding_ids(one)
    two = lint("vllm serve org/m -tp 8 -pp 2 --distributed-executor-backend ray", nodes=2)
    assert "distributed.ray-on-single-node" not in finding_ids(two)


def test_hardware_pitfall_waits_for_the_gpu() -> None:
    cmd = "NCCL_CUMEM_ENABLE=0 vllm serve org/m"
    unknown_gpu = lint(cmd)
    assert "pitfall.nccl-cumem-disabled-gb200" in {n.id for n in unknown_gpu.not_checked}
    assert "pitfall.nccl-cumem-disabled-gb200" in finding_ids(lint(cmd, gpu="GB200"))
    assert "pitfall.nccl-cumem-disabled-gb200" not in finding_ids(lint(cmd, gpu="H100"))
    # without the variable the rule is not even a question
    assert "pitfall.nccl-cumem-disabled-gb200" not in {n.id for n in lint("vllm serve org/m").not_checked}


def test_version_ranges_of_pitfalls_are_respected() -> None:
    cmd = "vllm serve deepseek-ai/DeepSeek-V3 -tp 8 -ep --gpu-memory-utilization 0.95"
    assert "pitfall.moe-gpu-memory-095" in finding_ids(lint(cmd, version="0.32.0"))
    assert "pitfall.moe-gpu-memory-095" not in finding_ids(lint(cmd, version="0.34.0"))


def test_secrets_are_not_echoed() -> None:
    out = lint("HF_TOKEN=hf_abcdef vllm serve org/m --api-key sk-very-secret")
    text = out.model_dump_json()
    assert "sk-very-secret" not in text and "hf_abcdef" not in text
    assert out.settings["api_key"] == "<redacted>" and "HF_TOKEN" in out.env


def test_every_pitfall_signal_is_one_the_lint_computes() -> None:
    kb = load_knowledge()
    used = {(e.id, s.signal) for e in kb if e.kind == "pitfall" for s in e.signals}
    assert used, "no pitfall carries signals"
    assert {(i, s) for i, s in used if s not in LINT_SIGNAL_DOCS} == set()
    for e in kb:
        if e.kind == "pitfall" and e.signals:
            assert e.severity and e.confidence and e.actions, e.id


def test_cli_exit_codes_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["lint", "--offline", "--", "vllm", "serve", "org/m", "--max-num-seqs", "8"]) == 0
    capsys.readouterr()
    assert cli_main(["lint", "--offline", "--json", "--command", "vllm serve org/m --enforce-eager"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["findings"][0]["id"] == "pitfall.enforce-eager-in-production"
    assert cli_main(["lint", "--env", "NOEQUALS"]) == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err
    assert cli_main(["lint"]) == 2


@pytest.mark.anyio
async def test_mcp_tool_is_read_only_and_cites_entries() -> None:
    from mcp import Client

    from vllm_tune.server.app import build_server

    async with Client(build_server()) as client:
        tool = {t.name: t for t in (await client.list_tools()).tools}["lint_config"]
        assert tool.annotations is not None
        assert (tool.annotations.read_only_hint, tool.annotations.destructive_hint,
                tool.annotations.open_world_hint) == (True, False, True)
        result = await client.call_tool("lint_config", {"command": "vllm serve org/m --bogus 1 --enforce-eager",
                                                        "vllm_version": "0.32.0", "offline": True})
        assert not result.is_error and result.structured_content is not None
        data = result.structured_content
        assert data["option_problems"][0]["option"] == "--bogus"
        assert data["findings"][0]["id"] == "pitfall.enforce-eager-in-production"
        assert {"pitfall.unknown-serve-option", "pitfall.enforce-eager-in-production"} <= set(data["knowledge_ids"])
        bad = await client.call_tool("lint_config", {})
        assert bad.is_error and "give a command line" in str(bad.content)


@pytest.mark.parametrize(("args", "option"), [
    ("--tensor-parallel-size abc", "--tensor-parallel-size"),
    ("--gpu-memory-utilization nan", "--gpu-memory-utilization"),
    ("--gpu-memory-utilization 1.5", "--gpu-memory-utilization"),
    ("--max-num-seqs -5", "--max-num-seqs"),
    ("--max-model-len 1e999", "--max-model-len"),
    ("-tp 0", "-tp"),
    ("-dp 0", "-dp"),
])
def test_values_vllm_refuses_are_critical(args: str, option: str) -> None:
    out = lint(f"vllm serve deepseek-r1 {args}")
    assert problems(out).get(option) == "bad-value", out.option_problems
    assert out.verdict.startswith("will not start")


@pytest.mark.parametrize("args", ["--max-model-len 32k", "--max-model-len auto", "--max-num-batched-tokens 8K",
                                  "--gpu-memory-utilization 0.9", "--seed 7", "-tp 2"])
def test_values_vllm_takes_pass(args: str) -> None:
    out = lint(f"vllm serve org/m {args}")
    assert not [p for p in out.option_problems if p.problem == "bad-value"], out.option_problems


@pytest.mark.parametrize(("yaml_text", "problem"), [
    ("tensor-parallel-size: {a: 1}\n", "bad-value"),
    ("max-num-seqs: true\n", "missing-value"),
    ("max-model-len: 1e999\n", "bad-value"),
    ("tensor-parallel-size: .5\n", "bad-value"),
])
def test_config_values_vllm_refuses(yaml_text: str, problem: str) -> None:
    out = lint_config(LintInput(command="vllm serve deepseek-r1", config_yaml=yaml_text, vllm_version="0.34.0",
                                offline=True))
    assert problem in {p.problem for p in out.option_problems}, out.option_problems


def test_an_option_as_the_value_is_a_missing_value() -> None:
    out = lint("vllm serve org/m --max-num-seqs --port 8001")
    assert problems(out)["--max-num-seqs"] == "missing-value"
    assert out.settings.get("port") == "8001"


@pytest.mark.parametrize("bad", ["tensor-parallel-size: 0", "data-parallel-size: 0", "tensor-parallel-size: .5",
                                 "pipeline-parallel-size: -1"])
def test_zero_or_fractional_sizes_with_a_catalog_model_do_not_crash(bad: str) -> None:
    # The catalog model's head count is divided by TP: a bad size must be a problem, never a ZeroDivisionError.
    out = lint_config(LintInput(command="vllm serve deepseek-r1 --enable-expert-parallel", config_yaml=bad + "\n",
                                offline=True))
    assert out.model_facts is not None
    assert "bad-value" in {p.problem for p in out.option_problems}


def test_the_cuda_graph_pitfall_is_not_raised_for_a_cpu_target() -> None:
    command = "vllm serve org/m --enforce-eager"
    on_gpu = lint_config(LintInput(command=command, offline=True))
    assert "pitfall.enforce-eager-in-production" in {f.id for f in on_gpu.findings}
    for cpu in (LintInput(command=command, device="cpu", offline=True),
                LintInput(command=command, gpu="cpu", offline=True)):
        out = lint_config(cpu)
        assert "pitfall.enforce-eager-in-production" not in {f.id for f in out.findings}
        assert "pitfall.enforce-eager-in-production" not in {n.id for n in out.not_checked}
