"""Implementation of scripts/record-captures (see its header)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx

from . import load
from .cpu_split import on_frontend_cores, split_cores
from .tiny_models import ensure_tiny_models
from .vllm_server import DEFAULT_ARGS, start_vllm

OUT = Path(__file__).resolve().parents[1] / "data" / "captures"
MAX_BYTES = 190_000


def _trim_log(text: str) -> str:
    """Keep the log up to the shutdown, cut to stay small (start and end kept)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Shutting down" in line or "EngineDeadError" in line or "Traceback" in line:
            lines = lines[:i]
            break
    body = "\n".join(lines) + "\n"
    if len(body) > MAX_BYTES:
        body = body[: MAX_BYTES // 2] + "\n[... trimmed ...]\n" + body[-MAX_BYTES // 2 :]
    return body


def _metrics(url: str) -> str:
    return httpx.get(url + "/metrics", timeout=10).text


def record(state: load.LoadState, model: Path) -> None:
    split = split_cores() if state.split_cores else None
    with on_frontend_cores(split), start_vllm(model, list(state.server_args), name="tiny-llama", split=split) as server:
        version = httpx.get(server.url + "/version", timeout=10).json().get("version", "?")
        before = _metrics(server.url)
        t0 = time.time()
        result = load.drive_state(server.url, server.model, state)
        window = time.time() - t0
        after = _metrics(server.url)
        log = server.log_text()
    (OUT / f"{state.name}.before.prom").write_text(before)
    (OUT / f"{state.name}.after.prom").write_text(after)
    (OUT / f"{state.name}.log").write_text(_trim_log(log))
    meta = {
        "state": state.name, "description": state.description, "window_s": round(window, 2),
        "flags": DEFAULT_ARGS + list(state.server_args), "vllm_version": version, "model": "tiny-llama",
        "load": {"requests": state.requests, "max_tokens": state.max_tokens, "prompt_tokens": state.prompt_tokens,
                 "concurrency": state.concurrency, "completed": result.completed, "failed": result.failed},
    }
    if split is not None:
        meta["cores"] = {"engine": sorted(split.engine), "api_server_and_client": sorted(split.frontend)}
    (OUT / f"{state.name}.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"{state.name}: {window:.1f} s, {result.completed}/{state.requests} completed", flush=True)


def main(argv: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    models = ensure_tiny_models(build=False)
    names = argv or list(load.STATES)
    for name in names:
        record(load.STATES[name], models.llama)
    if not argv:
        with start_vllm(models.mixtral, name="tiny-mixtral") as moe:
            log = moe.log_text()
        (OUT / "tiny-mixtral.startup.log").write_text(_trim_log(log))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
