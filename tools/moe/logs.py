"""Read vLLM server logs for fused-MoE config lookups and map them back to layer shapes.

Two lines matter (vLLM 0.32.0 ``fused_moe.py`` L1150-1167): an info line "Using configuration from <path> for MoE
layer." when a file was found, and a warning "Using default MoE config. Performance might be sub-optimal! Config
file not found at <paths>" when none was. Paths are comma-separated in current builds; older builds printed a Python
list. Both are logged once per process, so one line per distinct shape and worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from vllm_tune.tools.moe.naming import ConfigKey, parse_config_file_name

_FOUND = re.compile(r"Using configuration from (?P<path>.+?) for MoE layer")
_DEFAULT = re.compile(r"Using default MoE config\. Performance might be sub-optimal!\s*"
                      r"(?:Config file not found at (?P<paths>.*))?$")
_PREFIX = re.compile(r"^\((?P<proc>\w+)(?: pid=(?P<pid>\d+))?\)\s*")


@dataclass
class LookupEvent:
    kind: Literal["found", "default"]
    line_no: int
    paths: list[str]
    key: ConfigKey | None
    file_name: str | None
    process: str | None = None
    down: bool = False


@dataclass
class LogFindings:
    events: list[LookupEvent] = field(default_factory=list)
    default_warnings: int = 0
    found_lines: int = 0

    def keys(self, kind: Literal["found", "default"]) -> list[ConfigKey]:
        seen: list[ConfigKey] = []
        for event in self.events:
            if event.kind == kind and event.key is not None and event.key not in seen:
                seen.append(event.key)
        return seen


_PATH = re.compile(r"[^\s'\"\[,]*E=\d+,N=\d+,device_name=[^,\s'\"]+(?:,dtype=[a-z0-9_]+)?"
                   r"(?:,block_shape=\[\d+,\d+\])?(?:,backend=\w+)?(?:_down)?\.json")


def _split_paths(text: str) -> list[str]:
    # File names contain commas and the path list is comma-joined (or a Python list in old builds), so pick out
    # each config path by its own shape rather than splitting.
    return [m.group(0) for m in _PATH.finditer(text)]


def read_moe_log(text: str) -> LogFindings:
    findings = LogFindings()
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        prefix = _PREFIX.match(line)
        proc = prefix["proc"] if prefix else None
        found = _FOUND.search(line)
        if found:
            findings.found_lines += 1
            findings.events.append(_event("found", line_no, [found["path"].strip()], proc))
            continue
        default = _DEFAULT.search(line)
        if default:
            findings.default_warnings += 1
            paths = _split_paths(default["paths"] or "")
            findings.events.append(_event("default", line_no, paths, proc))
    return findings


def _event(kind: Literal["found", "default"], line_no: int, paths: list[str], proc: str | None) -> LookupEvent:
    for path in paths:
        parsed = parse_config_file_name(path)
        if parsed is not None:
            name = re.split(r"[\\/]", path)[-1]
            return LookupEvent(kind, line_no, paths, parsed[0], name, proc, parsed[1])
    return LookupEvent(kind, line_no, paths, None, None, proc)
