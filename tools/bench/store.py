"""Results on disk and background runs: one folder per run id under the results directory.

Layout: <dir>/<run_id>/status.json (state and progress, rewritten while running) and
<dir>/<run_id>/result.json (the `vllm bench serve`-compatible result plus our blocks); a plain run that
scraped /metrics also leaves the first and last scrape of its measured window there as `vllm-tune capture`
writes a pair (before.prom, after.prom, capture.json), which `diagnose --run RUN_ID` reads. A background
run lives in the process that started it (the MCP server); its files outlive that process, so status
and results stay readable after a restart, and a run whose process died is reported as such.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.files import allowed, read_text

DEFAULT_RESULTS_DIR = "./vllm-tune-results"
ENV_RESULTS_DIR = "VLLM_TUNE_RESULTS_DIR"
MAX_STATUS_BYTES = 1024 * 1024
MAX_RESULT_BYTES = 256 * 1024 * 1024
_RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")

RunState = Literal["running", "completed", "cancelled", "failed", "lost"]


class RunStatus(BaseModel):
    run_id: str
    state: RunState
    total: int = 0
    sent: int = 0
    done: int = 0
    failed: int = 0
    phase: str = ""
    message: str = ""
    pid: int = Field(default_factory=os.getpid)
    started_utc: str = ""
    updated_utc: str = ""
    result_path: str | None = None


def results_dir(explicit: str | None = None) -> Path:
    """The results folder: the caller's (held to the file roots over MCP, since runs are written there), else
    the operator's VLLM_TUNE_RESULTS_DIR, else ./vllm-tune-results."""
    if explicit:
        from vllm_tune.tools.files import allowed

        return allowed(Path(explicit).expanduser(), "results folder")
    return Path(os.environ.get(ENV_RESULTS_DIR) or DEFAULT_RESULTS_DIR).expanduser()


def new_run_id() -> str:
    return f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ResultStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def run_dir(self, run_id: str) -> Path:
        if not _RUN_ID.match(run_id):
            raise BadInputError(f"bad run id {run_id!r}; expected the id run_benchmark returned")
        return self.root / run_id

    def _write(self, path: Path, data: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
        tmp.write_text(data, encoding="utf-8")
        tmp.replace(path)

    def write_status(self, status: RunStatus) -> None:
        status.updated_utc = _utc()
        if not status.started_utc:
            status.started_utc = status.updated_utc
        self._write(self.run_dir(status.run_id) / "status.json", status.model_dump_json(indent=1))

    def find_run(self, run_id: str) -> Path:
        """The folder of an existing run: the one lookup of a run id for every tool that takes one."""
        folder = self.run_dir(run_id)
        allowed(folder, "run folder")  # over MCP the results folder is a caller's argument
        if not folder.is_dir():
            raise BadInputError(f"no benchmark run {run_id} under {self.root}")
        return folder

    def read_status(self, run_id: str) -> RunStatus:
        path = self.find_run(run_id) / "status.json"
        if not path.is_file():
            raise BadInputError(f"no benchmark run {run_id} under {self.root}")
        status = RunStatus.model_validate_json(read_text(path, limit=MAX_STATUS_BYTES, what="run status"))
        if status.state == "running" and not _alive(status.pid):
            status.state = "lost"
            status.message = "the process running this benchmark exited before it finished"
        return status

    def write_result(self, run_id: str, result: dict[str, Any], name: str = "result.json") -> Path:
        path = self.run_dir(run_id) / name
        self._write(path, json.dumps(result, indent=1, default=str))
        return path

    def read_result(self, run_id: str, name: str = "result.json") -> dict[str, Any]:
        path = self.run_dir(run_id) / name
        allowed(path.parent, "run folder")
        if not path.is_file():
            raise BadInputError(f"benchmark run {run_id} has no results yet")
        try:
            data = json.loads(read_text(path, limit=MAX_RESULT_BYTES, what="result"))
        except (ValueError, RecursionError):
            raise BadInputError(f"the result of benchmark run {run_id} is not valid JSON") from None
        if not isinstance(data, dict):
            raise BadInputError(f"the result of benchmark run {run_id} is not a JSON object")
        return data


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class StatusWriter:
    """Rewrites status.json at most every `every_s` seconds while a run progresses."""

    def __init__(self, store: ResultStore, status: RunStatus, every_s: float = 1.0) -> None:
        self.store, self.status, self.every_s = store, status, every_s
        self._last = 0.0

    def update(self, force: bool = False, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self.status, key, value)
        now = time.monotonic()
        if force or now - self._last >= self.every_s:
            self._last = now
            self.store.write_status(self.status)
