"""lint_config: check a vLLM serving configuration before it is started (or after it misbehaves).

Two kinds of checks, both citing the knowledge base:
- the option surface: every option and VLLM_* variable is read against the tables built from vLLM's own
  parser and vllm.envs for the target release (unknown, from another release, abbreviated, hidden
  spellings, bad choices, removed variables);
- the pitfalls: knowledge entries of kind `pitfall` that carry conditions on configuration signals
  (tools/lint/signals.py), evaluated by the same engine as the triage rules, with the model's architecture
  when it can be resolved (bundled catalog, local config.json or the hub unless offline).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from vllm_tune.tools.diagnose.engine import condition_holds, evaluate
from vllm_tune.tools.diagnose.models import Finding
from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.kb import load_knowledge
from vllm_tune.tools.kb.loader import KnowledgeBase
from vllm_tune.tools.lint.flags import FlagTable, load_table, pick_version
from vllm_tune.tools.lint.parse import FlagProblem, ServeConfig, read_serve_config
from vllm_tune.tools.lint.signals import LINT_SIGNAL_DOCS, Context, config_signals
from vllm_tune.tools.models.facts import ModelFacts
from vllm_tune.tools.models.resolve import resolve_model

# Knowledge entries behind the option-surface checks.
KB_UNKNOWN_OPTION = "pitfall.unknown-serve-option"
KB_ABBREVIATION = "pitfall.serve-option-abbreviation"
KB_SWITCH_SPELLING = "change.serve-switches-enable-disable"
KB_UNKNOWN_ENV = "pitfall.unknown-vllm-env"
_PROBLEM_KB = {"unknown": KB_UNKNOWN_OPTION, "other-release": KB_UNKNOWN_OPTION, "bad-choice": KB_UNKNOWN_OPTION,
               "bad-value": KB_UNKNOWN_OPTION,
               "missing-value": KB_UNKNOWN_OPTION, "abbreviation": KB_ABBREVIATION,
               "hidden-spelling": KB_SWITCH_SPELLING, "repeated": KB_UNKNOWN_OPTION}
_RANK = {"critical": 0, "warning": 1, "info": 2}


# What vLLM runs on; CUDA-graph and GPU-memory pitfalls do not apply to the CPU backend.
Device = Literal["cuda", "rocm", "cpu", "tpu", "xpu"]


class LintInput(BaseModel):
    command: str | None = Field(default=None, description="a `vllm serve ...` command line (also with env in "
                                "front, python -m or docker run forms)")
    config_yaml: str | None = Field(default=None, description="the text of a `--config` YAML file")
    config_file: str | None = Field(default=None, description="path of a `--config` YAML file on this machine")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables the server starts with")
    vllm_version: str | None = Field(default=None, description="release to check against (default: newest "
                                     "bundled table)")
    model: str | None = Field(default=None, description="model id or local path when the command does not name it")
    gpu: str | None = Field(default=None, description="GPU name, e.g. H200 or GB200, for hardware-specific pitfalls")
    device: Device | None = Field(default=None, description="target device (default: a GPU, or cpu when gpu is cpu)")
    nodes: int | None = Field(default=None, ge=1, le=4096, description="nodes the deployment spans")
    offline: bool = Field(default=False, description="never read the model's config from the Hugging Face hub")

    @model_validator(mode="after")
    def _something(self) -> LintInput:
        if not (self.command or self.config_yaml or self.config_file or self.env):
            raise ValueError("give a command line, a config YAML (text or file) or environment variables")
        return self


class OptionProblem(BaseModel):
    option: str
    problem: str = Field(description="unknown | other-release | bad-choice | bad-value | missing-value | "
                                     "abbreviation | hidden-spelling | repeated | unknown-env | removed-env")
    severity: str
    detail: str
    suggestion: str | None = None
    knowledge_ids: list[str]


class NotChecked(BaseModel):
    """A pitfall that could not be decided for lack of facts (the model's architecture, the GPU)."""

    id: str
    missing: list[str] = Field(description="signals that could not be derived")
    needs: str


class LintOutput(BaseModel):
    verdict: str
    vllm_version: str = Field(description="release whose option table was used")
    model: str | None = None
    model_facts: str | None = Field(default=None, description="where the model's architecture was read, if it was")
    settings: dict[str, str] = Field(description="effective options (attribute name -> value) after precedence")
    env: list[str] = Field(description="environment variable names seen (values are not echoed)")
    option_problems: list[OptionProblem]
    findings: list[Finding]
    not_checked: list[NotChecked] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    knowledge_ids: list[str] = Field(default_factory=list)


def _flag_entry_ids(kb: KnowledgeBase, option: str) -> list[str]:
    return [e.id for e in kb if e.flag is not None and e.flag.name == option]


def _option_problems(cfg: ServeConfig, table: FlagTable, kb: KnowledgeBase) -> list[OptionProblem]:
    out: list[OptionProblem] = []
    for p in cfg.problems:
        out.append(_to_output(p, kb))
    for name in sorted(cfg.env):
        if name in table.removed_env:
            out.append(OptionProblem(option=name, problem="removed-env", severity="critical",
                                     detail=f"vLLM {table.version} refuses to start with it set: "
                                            f"{table.removed_env[name]}",
                                     knowledge_ids=[KB_UNKNOWN_ENV]))
        elif name.startswith("VLLM_") and table.env_vars and name not in table.env_vars:
            removed = [e for e in kb if e.env is not None and e.env.name == name]
            detail = (f"vLLM {table.version} does not read it (it logs 'Unknown vLLM environment variable' at "
                      "start-up, or refuses to start with --fail-on-environ-validation)")
            out.append(OptionProblem(option=name, problem="unknown-env", severity="warning", detail=detail,
                                     suggestion=table.suggest_env(name),
                                     knowledge_ids=[KB_UNKNOWN_ENV, *[e.id for e in removed]]))
    out.sort(key=lambda p: (_RANK.get(p.severity, 3), p.option))
    return out


def _to_output(p: FlagProblem, kb: KnowledgeBase) -> OptionProblem:
    ids = [_PROBLEM_KB.get(p.problem, KB_UNKNOWN_OPTION), *_flag_entry_ids(kb, p.flag)]
    if p.suggestion:
        ids += _flag_entry_ids(kb, p.suggestion)
    return OptionProblem(option=p.flag, problem=p.problem, severity=p.severity, detail=p.detail,
                         suggestion=p.suggestion, knowledge_ids=list(dict.fromkeys(ids)))


def _model_facts(name: str | None, offline: bool, notes: list[str]) -> ModelFacts | None:
    if not name:
        notes.append("no model named: checks that need the model's architecture were not run")
        return None
    try:
        return resolve_model(name, offline=offline)
    except (BadInputError, TargetError) as exc:
        notes.append(f"model facts unavailable ({exc}); checks that need the architecture were not run")
        return None


_MODEL_SIGNALS = {"heads_mod_tp", "experts_mod_ep", "ep_over_experts", "is_moe", "moe_density_pct", "is_mla",
                  "fp8_block_misaligned", "fp8_weights"}
_GPU_SIGNALS = {"gpu_gb200_class", "gpu_h200"}


def _needs(missing: list[str]) -> str | None:
    """What would let a rule be decided; None when a missing signal is a setting that was simply not given
    (the rule does not apply) rather than a fact we lack."""
    if set(missing) & _GPU_SIGNALS:
        return "the GPU (give gpu)"
    if set(missing) & _MODEL_SIGNALS:
        return "the model's architecture (name the model; it must be in the catalog, local, or on the hub)"
    return None


def lint_config(req: LintInput) -> LintOutput:
    version, version_note = pick_version(req.vllm_version)
    table = load_table(version)
    kb = load_knowledge()
    cfg = read_serve_config(command=req.command, config_yaml=req.config_yaml, config_file=req.config_file,
                            env=dict(req.env), version=version)
    notes = [n for n in (version_note, *cfg.notes) if n]
    model_name = req.model or cfg.model
    facts = _model_facts(model_name, req.offline, notes)
    device = req.device or ("cpu" if (req.gpu or "").strip().lower() == "cpu" else None)
    gpu = None if device == "cpu" else req.gpu
    signals = config_signals(cfg, Context(model=facts, gpu=gpu, nodes=req.nodes, device=device))
    target = req.vllm_version or version
    findings, _ = evaluate(kb, signals, version=target, kinds=("pitfall",))
    fired = {f.id for f in findings}
    not_checked: list[NotChecked] = []
    for entry in kb:
        if entry.kind != "pitfall" or not entry.signals or entry.id in fired \
                or not entry.applies_to.vllm.contains(target) or entry.match != "all":
            continue
        missing = [s.signal for s in entry.signals if s.signal not in signals.values]
        lacking = (facts is None and bool(set(missing) & _MODEL_SIGNALS)) or \
            (req.gpu is None and bool(set(missing) & _GPU_SIGNALS))
        # Undecided only if what we do know points at the pitfall and what is missing is a fact we lack.
        present_hold = all(condition_holds(s, signals.values[s.signal].value) for s in entry.signals
                           if s.signal in signals.values)
        needs = _needs(missing)
        if lacking and present_hold and needs:
            not_checked.append(NotChecked(id=entry.id, missing=missing, needs=needs))
    problems = _option_problems(cfg, table, kb)
    ids = [*dict.fromkeys([*(i for p in problems for i in p.knowledge_ids), *(f.id for f in findings)])]
    return LintOutput(
        verdict=_verdict(problems, findings, len(not_checked)), vllm_version=version, model=model_name,
        model_facts=facts.status if facts is not None else None,
        settings={dest: _shown(dest, s.value) for dest, s in sorted(cfg.values.items())}, env=sorted(cfg.env),
        option_problems=problems, findings=findings, not_checked=not_checked, notes=notes,
        knowledge_ids=ids)


_SECRET_WORDS = ("key", "token", "secret", "password", "credential")


def _shown(dest: str, value: object) -> str:
    """Option values as given, except anything that looks like a credential."""
    return "<redacted>" if any(w in dest.lower() for w in _SECRET_WORDS) else str(value)


def _verdict(problems: list[OptionProblem], findings: list[Finding], undecided: int) -> str:
    severities = [p.severity for p in problems] + [f.severity for f in findings]
    crit, warn = severities.count("critical"), severities.count("warning")
    tail = f"; {undecided} check(s) need facts not given" if undecided else ""
    if crit:
        return f"will not start or will misbehave: {crit} critical, {warn} warning(s){tail}"
    if warn:
        return f"starts, but {warn} warning(s) worth fixing{tail}"
    if severities:
        return f"no problems; {len(severities)} note(s){tail}"
    return f"no problems found{tail}"


def signal_docs() -> dict[str, str]:
    return dict(LINT_SIGNAL_DOCS)
