"""Tuning sessions on disk: <results dir>/tune/<session id>/session.json, written atomically after each step,
so a session survives the MCP server or the CLI exiting between trials."""

from __future__ import annotations

import os
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from vllm_tune.tools.bench.store import results_dir
from vllm_tune.tools.errors import BadInputError
from vllm_tune.tools.tune.models import TuneState

_SESSION_ID = re.compile(r"^tune-[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")


def new_session_id() -> str:
    return f"tune-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def session_dir(session_id: str, save_result: str | None) -> Path:
    if not _SESSION_ID.match(session_id):
        raise BadInputError(f"bad session id {session_id!r}; expected the id tune_start returned")
    return results_dir(save_result) / "tune" / session_id


def save(state: TuneState) -> None:
    path = Path(state.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(state.model_dump_json(indent=1), encoding="utf-8")
    tmp.replace(path)


def load(session_id: str, save_result: str | None) -> TuneState:
    path = session_dir(session_id, save_result) / "session.json"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        raise BadInputError(f"no tuning session {session_id} under {path.parent.parent}") from None
    try:
        return TuneState.model_validate_json(text)
    except ValidationError:
        raise BadInputError(f"{path} is not a tuning session this version of vllm-tune can read") from None
