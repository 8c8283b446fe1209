"""Read a serving configuration: a `vllm serve` command line, a `--config` YAML file, environment variables.

Precedence follows vLLM: command line over the YAML config over defaults. Every option is matched against
the flag table of the target release (tools/lint/flags.py); what the parser would reject or only quietly
accept is collected as a FlagProblem, and reading carries on so that one typo does not hide the rest.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.files import read_text
from vllm_tune.tools.lint.flags import FlagTable, Resolved, bundled_versions, load_table
from vllm_tune.tools.lint.values import problem as value_problem

_MAX_CONFIG_BYTES = 1024 * 1024
# What a key of a vLLM config YAML can look like; anything else is not echoed back.
_OPTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,99}")
# Ways a serving process is started; the serve arguments follow the marker.
_ENTRYPOINT_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")


@dataclass
class Setting:
    value: Any
    spelling: str
    source: str  # "command line" | "config file"


@dataclass
class FlagProblem:
    flag: str
    problem: str  # unknown | other-release | abbreviation | hidden-spelling | bad-choice | repeated | missing-value
    detail: str
    suggestion: str | None = None
    severity: str = "warning"


@dataclass
class ServeConfig:
    model: str | None = None
    values: dict[str, Setting] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    problems: list[FlagProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config_file: str | None = None

    def get(self, dest: str) -> Any:
        s = self.values.get(dest)
        return s.value if s is not None else None

    def given(self, dest: str) -> bool:
        return dest in self.values


def _split_command(command: str) -> list[str]:
    text = command.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise BadInputError(f"cannot split the command line: {exc}") from None


def _serve_args(tokens: list[str], cfg: ServeConfig) -> list[str]:
    """The tokens after the program that starts vLLM; environment assignments go to cfg.env."""
    i = 0
    while i < len(tokens) and not tokens[i].startswith("-") and tokens[i].split("=")[0].isidentifier() \
            and "=" in tokens[i]:
        key, value = tokens[i].split("=", 1)
        cfg.env[key] = value
        i += 1
    rest = tokens[i:]
    for j, tok in enumerate(rest):
        if tok == "serve" and j > 0 and Path(rest[j - 1]).name == "vllm":
            return rest[j + 1:]
        if tok in _ENTRYPOINT_MODULES:
            return rest[j + 1:]
    if rest and rest[0] == "docker":
        return _docker_args(rest, cfg)
    if rest and rest[0].startswith("-"):
        return rest  # already just the arguments
    raise BadInputError("no `vllm serve` (or `python -m vllm.entrypoints.openai.api_server`, or `docker run ... "
                        "vllm-openai`) found in the command line")


def _docker_args(tokens: list[str], cfg: ServeConfig) -> list[str]:
    for j, tok in enumerate(tokens):
        if tok in ("-e", "--env") and j + 1 < len(tokens) and "=" in tokens[j + 1]:
            key, value = tokens[j + 1].split("=", 1)
            cfg.env[key] = value
        elif tok.startswith("--env=") and "=" in tok[6:]:
            key, value = tok[6:].split("=", 1)
            cfg.env[key] = value
        if "vllm-openai" in tok or tok.startswith("vllm/vllm"):
            rest = tokens[j + 1:]
            return rest[1:] if rest[:1] == ["serve"] else rest
    raise BadInputError("a docker command line without a vLLM image (e.g. vllm/vllm-openai) in it")


def _other_release(token: str, table: FlagTable) -> tuple[str, str | None] | None:
    """(release that knows the option, the spelling this release uses for the same setting), or None."""
    for other in bundled_versions():
        if other == table.version:
            continue
        res = load_table(other).resolve(token)
        if res is None:
            continue
        same = None
        for spelling in table.by_dest(res.option.dest):
            opt = table.options[spelling]
            stored = res.option.sets.get(res.canonical) if res.option.sets else None
            if not spelling.startswith("--"):
                continue
            if res.option.sets is None or (opt.sets is not None and opt.sets.get(spelling) == stored):
                same = spelling
                break
        return other, same
    return None


def _record(cfg: ServeConfig, res: Resolved, value: Any, source: str) -> None:
    old = cfg.values.get(res.option.dest)
    if old is not None and old.source == source and old.value != value:
        cfg.problems.append(FlagProblem(res.canonical, "repeated",
                                        f"given twice ({old.spelling} {old.value!r}, then {res.spelling} "
                                        f"{value!r}); the last one wins", severity="info"))
    if old is not None and old.source == "command line" and source == "config file":
        return  # the command line wins over the config file
    cfg.values[res.option.dest] = Setting(value, res.spelling, source)


def _note_spelling(cfg: ServeConfig, res: Resolved, table: FlagTable) -> None:
    if res.how == "abbreviation":
        cfg.problems.append(FlagProblem(res.spelling, "abbreviation",
                                        f"accepted as an abbreviation of {res.canonical}; a later release that adds "
                                        "another option with the same prefix turns it into an error",
                                        suggestion=res.canonical, severity="info"))
    elif res.how == "hidden":
        visible = [s for s in table.by_dest(res.option.dest) if s.startswith("--")]
        same = [s for s in visible if res.option.sets and res.option.sets.get(s) == res.option.sets.get(res.canonical)]
        cfg.problems.append(FlagProblem(res.spelling, "hidden-spelling",
                                        f"vLLM {table.version} still accepts it but no longer documents it",
                                        suggestion=same[0] if same else None, severity="info"))


def _unknown(cfg: ServeConfig, token: str, table: FlagTable, source: str) -> None:
    other = _other_release(token, table)
    if other is not None:
        release, same = other
        cfg.problems.append(FlagProblem(token.split("=", 1)[0], "other-release",
                                        f"not an option of vLLM {table.version} (it is one of {release}); "
                                        f"vllm serve {table.version} would refuse to start", suggestion=same,
                                        severity="critical"))
        return
    hint = table.suggest(token)
    where = "" if source == "command line" else f" (in the {source})"
    cfg.problems.append(FlagProblem(token.split("=", 1)[0], "unknown",
                                    f"not an option of vLLM {table.version}{where}; vllm serve would refuse to start",
                                    suggestion=hint, severity="critical"))


def _check_choice(cfg: ServeConfig, res: Resolved, value: Any) -> bool:
    """False (and a problem recorded) when vLLM would refuse the value: not a choice, not convertible by the
    option's converter (fed what vLLM's parser sees, _argv_text), or outside the bounds of its config field."""
    choices = res.option.choices
    if choices and res.how != "dotted" and str(value) not in choices:
        cfg.problems.append(FlagProblem(res.canonical, "bad-choice",
                                        f"{_shown_value(value)} is not one of {', '.join(choices)}",
                                        severity="critical"))
        return False
    spec = res.option.value
    if spec is not None and res.how != "dotted":
        why = value_problem(spec, _argv_text(value))
        if why is not None:
            cfg.problems.append(FlagProblem(res.canonical, "bad-value", f"{_shown_value(value)} {why}; vllm serve "
                                            "would refuse to start", severity="critical"))
            return False
    return True


def _argv_text(value: Any) -> str:
    """The text vLLM's parser sees for a value: the token itself, or what vLLM makes of a config YAML value
    (a mapping becomes JSON, anything else str())."""
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def _shown_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_arguments(args: list[str], table: FlagTable, cfg: ServeConfig) -> None:
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-") or tok == "-" or _is_number(tok):
            if cfg.model is None:
                cfg.model = tok
            else:
                cfg.notes.append(f"ignored a stray argument: {tok!r}")
            continue
        res = table.resolve(tok)
        if res is None:
            _unknown(cfg, tok, table, "command line")
            # skip a value that plainly belongs to the unknown option
            if "=" not in tok and i < len(args) and not args[i].startswith("-"):
                i += 1
            continue
        _note_spelling(cfg, res, table)
        if res.how == "attached":
            value: Any = tok[len(res.spelling):].lstrip("=")
        elif res.option.takes_value:
            if "=" in tok:
                value = tok.split("=", 1)[1]
            elif i < len(args) and not _looks_like_option(args[i]):
                value = args[i]
                i += 1
            else:
                cfg.problems.append(FlagProblem(res.canonical, "missing-value", "needs a value", severity="critical"))
                continue
        else:
            value = res.option.sets.get(res.canonical, True) if res.option.sets else True
        if res.how == "dotted":
            continue  # a key inside a JSON option; the option itself is known
        if res.canonical == "--config":
            cfg.config_file = str(value)
        if res.canonical == "--model":
            cfg.model = str(value)
        if _check_choice(cfg, res, value):
            _record(cfg, res, value, "command line")


# argparse reads a token that starts with '-' as an option, not a value, unless it looks like a negative number
# (vLLM's parser has no option spelled like one) or holds a space.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _looks_like_option(tok: str) -> bool:
    return tok.startswith("-") and tok != "-" and not _NEGATIVE_NUMBER.match(tok) and " " not in tok


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def read_config_yaml(text: str, table: FlagTable, cfg: ServeConfig, where: str) -> None:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # The problem and its line, never the snippet PyYAML quotes: the file may be anything.
        problem = getattr(exc, "problem", None) or "cannot be parsed"
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise BadInputError(f"{where} is not valid YAML ({problem}{at})") from None
    except RecursionError:
        raise BadInputError(f"{where} is nested too deeply to be a vLLM config") from None
    if data is None:
        return
    if not isinstance(data, dict):
        raise BadInputError(f"{where} must be a YAML mapping of option names to values")
    odd = 0
    for key, value in data.items():
        if not isinstance(key, str) or not _OPTION_NAME.fullmatch(key):
            odd += 1  # counted, not quoted: a file that is not a vLLM config may hold anything (a password hash)
            continue
        name = "--" + key.replace("_", "-")
        if name == "--model" and cfg.model is None:
            cfg.model = str(value)
        res = table.resolve(name)
        if res is None or res.how == "abbreviation":
            _unknown(cfg, name, table, "config file")
            continue
        if not res.option.takes_value:
            if not isinstance(value, bool):
                cfg.problems.append(FlagProblem(name, "bad-choice",
                                                f"a switch; give true or false, not {_shown_value(value)}",
                                                severity="critical"))
                continue
            stored = res.option.sets.get(res.canonical, True) if res.option.sets else True
            value = stored if value else (not stored)
        elif isinstance(value, bool):
            # vLLM turns `key: true` into a bare --key, which an option that takes a value refuses, and drops
            # `key: false`.
            if value:
                cfg.problems.append(FlagProblem(name, "missing-value", "takes a value, not true",
                                                severity="critical"))
            continue
        elif not isinstance(value, list) and not _check_choice(cfg, res, value):
            continue
        _record(cfg, res, value, "config file")
    if odd:
        cfg.problems.append(FlagProblem("(config keys)", "unknown",
                                        f"{odd} key(s) in {where} are not option names at all (not shown); is it a "
                                        "vLLM config file?", severity="critical"))


def read_serve_config(*, command: str | None, config_yaml: str | None, config_file: str | None,
                      env: dict[str, str], version: str) -> ServeConfig:
    table = load_table(version)
    cfg = ServeConfig()
    if command:
        read_arguments(_serve_args(_split_command(command), cfg), table, cfg)
    path = config_file or cfg.config_file
    if config_yaml:
        read_config_yaml(config_yaml, table, cfg, "the config YAML")
    elif path:
        try:
            text = read_text(path, limit=_MAX_CONFIG_BYTES, what="config file")
        except BadInputError as exc:
            if config_file:
                raise
            cfg.notes.append(f"--config {path} could not be read here ({exc}); its settings were not checked")
        else:
            read_config_yaml(text, table, cfg, path)
    cfg.env.update(env)
    if not command and not config_yaml and not path and not env:
        raise BadInputError("nothing to check: give a vllm serve command line, a config YAML or environment variables")
    return cfg
