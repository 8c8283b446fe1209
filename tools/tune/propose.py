"""The next trial: one lever moved from the best command so far, chosen by evidence before habit.

Order of moves: first what the diagnosis of the best trial's own window asks for (a triage finding whose
action names an allowed lever), then the goal's usual levers from the knowledge base. One change per trial,
so a measured difference has one cause; numbers move by a factor of two (coarse steps first, the way
auto_tune.sh walks its grid); a value already measured is never proposed again. Every candidate is linted and
a command that would not start is recorded as rejected instead of being measured. When what_if can be
calibrated on the session's measured runs, the candidates it can simulate go first, by predicted gain
(tools/tune/predict.py); the rest keep this order after them.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Literal

from vllm_tune.tools.lint.flags import FlagTable
from vllm_tune.tools.lint.parse import read_serve_config

Direction = Literal["raise", "lower", "enable", "disable"]


@dataclass(frozen=True)
class Lever:
    flag: str
    dest: str
    kind: Literal["int", "switch"]
    low: int = 1
    high: int = 1 << 20
    knowledge_ids: tuple[str, ...] = ()


LEVERS: dict[str, Lever] = {
    "--max-num-seqs": Lever("--max-num-seqs", "max_num_seqs", "int", 1, 16_384,
                            ("lever.max-num-seqs-by-goal",)),
    "--max-num-batched-tokens": Lever("--max-num-batched-tokens", "max_num_batched_tokens", "int", 16, 1 << 20,
                                      ("lever.batched-tokens-by-goal",)),
    "--async-scheduling": Lever("--async-scheduling", "async_scheduling", "switch",
                                knowledge_ids=("lever.throughput-batching", "lever.slo-tpot")),
    "--enable-prefix-caching": Lever("--enable-prefix-caching", "enable_prefix_caching", "switch",
                                     knowledge_ids=("lever.slo-ttft",)),
}

# What to try by goal when the diagnosis names nothing; the first metric of the SLO picks the latency list.
GOAL_MOVES: dict[str, list[tuple[str, Direction]]] = {
    "latency-ttft": [("--max-num-batched-tokens", "raise"), ("--max-num-seqs", "raise"),
                     ("--enable-prefix-caching", "enable")],
    "latency-decode": [("--max-num-batched-tokens", "lower"), ("--max-num-seqs", "lower"),
                       ("--async-scheduling", "enable")],
    "throughput": [("--max-num-seqs", "raise"), ("--max-num-batched-tokens", "raise"),
                   ("--async-scheduling", "enable")],
}


@dataclass
class Move:
    flag: str
    direction: Direction
    why: str
    knowledge_ids: list[str]


@dataclass
class Candidate:
    command: str
    changes: dict[str, str]
    settings: dict[str, str]
    rationale: str
    knowledge_ids: list[str]


def default_levers(goal_key: str) -> list[str]:
    return list(dict.fromkeys(flag for flag, _ in GOAL_MOVES[goal_key]))


def lever_settings(command: str, table: FlagTable, levers: list[str]) -> dict[str, str]:
    """The values the command gives the levers ('' when not given)."""
    cfg = read_serve_config(command=command, config_yaml=None, config_file=None, env={}, version=table.version)
    return {flag: str(cfg.get(LEVERS[flag].dest)) if cfg.given(LEVERS[flag].dest) else "" for flag in levers}


def diagnosis_moves(result: dict[str, Any] | None, levers: list[str]) -> list[Move]:
    """Flag actions of the findings diagnose_metrics made on the trial's own window, for allowed levers."""
    diagnosis = ((result or {}).get("server") or {}).get("diagnosis") or {}
    moves: list[Move] = []
    for finding in diagnosis.get("findings") or []:
        if finding.get("severity") == "info":
            continue
        for action in finding.get("actions") or []:
            target, direction = action.get("target"), action.get("direction")
            if action.get("kind") == "flag" and target in levers and direction in ("raise", "lower", "enable",
                                                                                    "disable"):
                why = f"the diagnosis of the best trial's window found {finding.get('id')}: {finding.get('title')}"
                moves.append(Move(target, direction, why, [str(finding.get("id")), *action.get("knowledge_ids", [])]))
    return moves


def _switch_spelling(table: FlagTable, dest: str, on: bool) -> str | None:
    for spelling in table.by_dest(dest):
        opt = table.options[spelling]
        if spelling.startswith("--") and opt.sets is not None and opt.sets.get(spelling) is on:
            return spelling
    return None


def apply_change(command: str, flag: str, value: str, table: FlagTable) -> str:
    """The command with every spelling of `flag` removed and the new setting appended."""
    words = shlex.split(command)
    lever = LEVERS[flag]
    out: list[str] = []
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        res = table.resolve(word) if word.startswith("-") else None
        if res is not None and res.option.dest == lever.dest:
            skip = res.option.takes_value and "=" not in word and i + 1 < len(words)
            continue
        out.append(word)
    if lever.kind == "int":
        out += [flag, value]
    else:
        spelling = _switch_spelling(table, lever.dest, value == "on")
        if spelling is None:
            raise ValueError(f"vLLM {table.version} has no spelling to turn {flag} {value}")
        out.append(spelling)
    return shlex.join(out)


def _step(lever: Lever, current: str, direction: Direction) -> str | None:
    if lever.kind == "switch":
        on = current.lower() in ("true", "on", "1")
        if direction == "enable" and not on:
            return "on"
        if direction == "disable" and (on or current == ""):
            return "off"
        return None
    if not current.isdigit():
        return None  # not pinned in the command: the loop does not guess the server's default
    value = int(current)
    new = min(lever.high, value * 2) if direction == "raise" else max(lever.low, value // 2)
    return str(new) if new != value else None


def candidates(command: str, moves: list[Move], levers: list[str], tried: list[dict[str, str]],
               table: FlagTable) -> tuple[list[Candidate], list[str]]:
    """Untried one-change candidates in move order, and notes on moves that could not be made."""
    base = lever_settings(command, table, levers)
    out: list[Candidate] = []
    notes: list[str] = []
    for move in moves:
        lever = LEVERS.get(move.flag)
        if lever is None or move.flag not in levers:
            continue
        new = _step(lever, base.get(move.flag, ""), move.direction)
        if new is None:
            if lever.kind == "int" and not base.get(move.flag, "").isdigit():
                notes.append(f"{move.flag} is not set in the command, so the loop cannot {move.direction} it; pin "
                             "its current value in the base command")
            continue
        settings = {**base, move.flag: new}
        if settings in tried or any(c.settings == settings for c in out):
            continue
        try:
            new_command = apply_change(command, move.flag, new, table)
        except ValueError as exc:
            notes.append(str(exc))
            continue
        out.append(Candidate(new_command, {move.flag: new}, settings,
                             f"{move.direction} {move.flag} to {new}: {move.why}",
                             list(dict.fromkeys([*move.knowledge_ids, *lever.knowledge_ids]))))
    return out, list(dict.fromkeys(notes))


def order_by_prediction(found: list[Candidate], gains: list[float | None]) -> list[Candidate]:
    """Predicted candidates first, highest predicted gain first (gains within 1 % keep the move order: the
    simulation cannot tell them apart), then the unpredicted ones in move order."""
    predicted = [(c, g) for c, g in zip(found, gains, strict=True) if g is not None]
    predicted.sort(key=lambda cg: -round(cg[1], 2))
    return [c for c, _ in predicted] + [c for c, g in zip(found, gains, strict=True) if g is None]
