"""What `vllm serve` accepts in a given release, from tables built off vLLM's own argument parser.

knowledge/serve_flags/serve-flags-<version>.json is written by scripts/build_serve_flags.py from the real
parser of that release: every option string (visible and hidden), the attribute it sets, whether it takes a
value, its choices and, for switches, what each spelling stores. Reading a command line against the table
finds what vLLM would reject (unknown options, bad choices) and what it accepts but an operator should not
rely on (abbreviations, hidden spellings, options of another release).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from vllm_tune.knowledge import SERVE_FLAGS_DIR


@dataclass(frozen=True)
class Option:
    dest: str
    takes_value: bool
    choices: tuple[str, ...] | None
    default: Any
    sets: dict[str, Any] | None  # switch spelling -> stored value
    hidden: bool
    value: dict[str, Any] | None = None  # how a single value is converted and bounded (tools/lint/values.py)


@dataclass(frozen=True)
class Resolved:
    """One command-line token matched against the table."""

    spelling: str  # the option as written, dashes normalised
    canonical: str  # the option string it resolved to
    option: Option
    how: str  # exact | underscore | abbreviation | hidden | dotted


class FlagTable:
    def __init__(self, version: str, options: dict[str, Option], source: str, env_vars: frozenset[str],
                 removed_env: dict[str, str]) -> None:
        self.version = version
        self.options = options
        self.source = source
        self.env_vars = env_vars
        self.removed_env = removed_env
        self._long = sorted(o for o in options if o.startswith("--"))

    def by_dest(self, dest: str) -> list[str]:
        return [s for s, o in self.options.items() if o.dest == dest and not o.hidden]

    def resolve(self, token: str) -> Resolved | None:
        """Match an option as argparse (with vLLM's underscore handling) would; None when it is unknown."""
        name = token.split("=", 1)[0]
        how = "exact"
        if token.startswith("-O") and not token.startswith("--") and "--optimization-level" in self.options:
            # vLLM rewrites -O3, -Odecode, -O=3 and -O 3 to --optimization-level before argparse sees them
            return Resolved("-O", "--optimization-level", self.options["--optimization-level"],
                            "attached" if len(token) > 2 else "exact")
        if name.startswith("--") and "_" in name:
            name, how = name.replace("_", "-"), "underscore"
        if name.startswith("--") and "." in name:
            # --compilation-config.mode 3: a dotted key into a JSON-valued option
            head = name.split(".", 1)[0]
            opt = self.options.get(head)
            if opt is not None and opt.takes_value:
                return Resolved(name, head, opt, "dotted")
            return None
        opt = self.options.get(name)
        if opt is not None:
            return Resolved(name, name, opt, "hidden" if opt.hidden else how)
        if name.startswith("--"):
            # argparse accepts any unambiguous prefix of a long option
            hits = [o for o in self._long if o.startswith(name)]
            dests = {self.options[o].dest for o in hits}
            if len(dests) == 1:
                return Resolved(name, hits[0], self.options[hits[0]], "abbreviation")
            return None
        # argparse glues a value only to one-letter short options (-n2, -qfp8); -tp2 is an error
        short = self.options.get(name[:2])
        if len(name) > 2 and short is not None and short.takes_value:
            return Resolved(name[:2], name[:2], short, "attached")
        return None

    def suggest(self, token: str) -> str | None:
        name = token.split("=", 1)[0].replace("_", "-")
        close = difflib.get_close_matches(name, self._long, n=1, cutoff=0.75)
        return close[0] if close else None

    def suggest_env(self, name: str) -> str | None:
        close = difflib.get_close_matches(name, sorted(self.env_vars), n=1, cutoff=0.8)
        return close[0] if close else None


def bundled_versions() -> list[str]:
    names = [p.name for p in SERVE_FLAGS_DIR.glob("serve-flags-*.json")]
    return sorted((n.removeprefix("serve-flags-").removesuffix(".json") for n in names), key=Version)


def pick_version(requested: str | None) -> tuple[str, str | None]:
    """(bundled table version, note). A requested release without a table uses the nearest older one."""
    versions = bundled_versions()
    if not requested:
        return versions[-1], None
    try:
        want = Version(requested.split("+")[0])
    except InvalidVersion:
        return versions[-1], f"'{requested}' is not a version; flags were read against vLLM {versions[-1]}"
    older = [v for v in versions if Version(v) <= want]
    if not older:
        return versions[0], (f"no flag table for vLLM {requested}; flags were read against {versions[0]}, the "
                             "oldest bundled, so options added since may be reported as unknown")
    chosen = older[-1]
    if Version(chosen) != want:
        return chosen, (f"no flag table for vLLM {requested}; flags were read against {chosen}, the nearest "
                        "older release bundled")
    return chosen, None


@cache
def load_table(version: str) -> FlagTable:
    path: Path = SERVE_FLAGS_DIR / f"serve-flags-{version}.json"
    data = json.loads(path.read_text())
    options: dict[str, Option] = {}
    for item in data["options"]:
        sets = item.get("sets")
        choices = tuple(item["choices"]) if item.get("choices") else None
        for spelling in [*item["options"], *item.get("hidden", [])]:
            options[spelling] = Option(dest=item["dest"], takes_value=item["takes_value"], choices=choices,
                                       default=item.get("default"), sets=sets,
                                       hidden=spelling in item.get("hidden", []), value=item.get("value"))
    return FlagTable(data["vllm"], options, f"knowledge/serve_flags/{path.name} ({data['how']})",
                     frozenset(data.get("env_vars", [])), dict(data.get("removed_env_vars", {})))
