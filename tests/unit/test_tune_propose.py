"""Tuning-loop proposals: one lever per trial, diagnosis first, never a repeat, spelled for the target release."""

from __future__ import annotations

import shlex

import pytest

from vllm_tune.tools.lint.flags import load_table
from vllm_tune.tools.tune.propose import (
    GOAL_MOVES,
    LEVERS,
    Move,
    apply_change,
    candidates,
    diagnosis_moves,
    lever_settings,
)

T34, T32 = load_table("0.34.0"), load_table("0.32.0")
LEVER_FLAGS = ["--max-num-seqs", "--max-num-batched-tokens", "--async-scheduling", "--enable-prefix-caching"]


def goal_moves(key: str) -> list[Move]:
    return [Move(f, d, "goal", list(LEVERS[f].knowledge_ids)) for f, d in GOAL_MOVES[key]]


@pytest.mark.parametrize("given", ["--max-num-seqs 8", "--max-num-seqs=8", "--max_num_seqs 8", "--max-num-seq 8"])
def test_a_change_replaces_every_spelling_of_the_flag(given: str) -> None:
    cmd = f"vllm serve org/m {given} --port 8000"
    out = apply_change(cmd, "--max-num-seqs", "16", T34)
    words = shlex.split(out)
    assert words[-2:] == ["--max-num-seqs", "16"] and "8" not in words and "--port" in words
    assert lever_settings(out, T34, LEVER_FLAGS)["--max-num-seqs"] == "16"


def test_switches_use_a_spelling_the_release_parses() -> None:
    cmd = "vllm serve org/m --no-enable-prefix-caching"
    assert shlex.split(apply_change(cmd, "--enable-prefix-caching", "on", T32))[-1] == "--enable-prefix-caching"
    off34 = apply_change("vllm serve org/m", "--enable-prefix-caching", "off", T34)
    off32 = apply_change("vllm serve org/m", "--enable-prefix-caching", "off", T32)
    assert off34.endswith("--disable-prefix-caching") and off32.endswith("--no-enable-prefix-caching")


def test_numbers_move_by_two_and_unpinned_flags_are_left_alone() -> None:
    cmd = "vllm serve org/m --max-num-seqs 8"
    found, notes = candidates(cmd, goal_moves("throughput"), LEVER_FLAGS, [lever_settings(cmd, T34, LEVER_FLAGS)], T34)
    assert [c.changes for c in found] == [{"--max-num-seqs": "16"}, {"--async-scheduling": "on"}]
    assert any("--max-num-batched-tokens is not set" in n for n in notes)
    assert "lever.max-num-seqs-by-goal" in found[0].knowledge_ids
    decode, _ = candidates("vllm serve org/m --max-num-seqs 1 --max-num-batched-tokens 16",
                           goal_moves("latency-decode"), LEVER_FLAGS, [], T34)
    assert [c.changes for c in decode] == [{"--async-scheduling": "on"}]  # both numbers are at their floor


def test_tried_settings_are_not_proposed_again() -> None:
    base = "vllm serve org/m --max-num-seqs 8"
    tried = [lever_settings(base, T34, LEVER_FLAGS),
             lever_settings(apply_change(base, "--max-num-seqs", "16", T34), T34, LEVER_FLAGS)]
    found, _ = candidates(base, goal_moves("throughput"), LEVER_FLAGS, tried, T34)
    assert {"--max-num-seqs": "16"} not in [c.changes for c in found]


def test_only_allowed_levers_move() -> None:
    found, _ = candidates("vllm serve org/m --max-num-seqs 8 --max-num-batched-tokens 512",
                          goal_moves("throughput"), ["--max-num-batched-tokens"], [], T34)
    assert [c.changes for c in found] == [{"--max-num-batched-tokens": "1024"}]


def test_diagnosis_findings_become_moves_for_allowed_levers() -> None:
    result = {"server": {"diagnosis": {"findings": [
        {"id": "triage.ttft-high-queue-growing", "title": "queue grows", "severity": "warning",
         "actions": [{"kind": "operational", "target": "replicas", "direction": "add", "knowledge_ids": []},
                     {"kind": "flag", "target": "--max-num-seqs", "direction": "raise",
                      "knowledge_ids": ["triage.ttft-high-queue-growing", "lever.max-num-seqs-by-goal"]}]},
        {"id": "triage.some-info", "title": "fyi", "severity": "info",
         "actions": [{"kind": "flag", "target": "--max-num-batched-tokens", "direction": "raise"}]},
    ]}}}
    moves = diagnosis_moves(result, LEVER_FLAGS)
    assert [(m.flag, m.direction) for m in moves] == [("--max-num-seqs", "raise")]
    assert "triage.ttft-high-queue-growing" in moves[0].knowledge_ids and "queue grows" in moves[0].why
    assert diagnosis_moves(result, ["--max-num-batched-tokens"]) == []
    assert diagnosis_moves(None, LEVER_FLAGS) == []
