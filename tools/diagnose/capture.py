"""`vllm-tune capture`: two timestamped /metrics scrapes a window apart, saved so that diagnose can read the
window from the files instead of trusting a typed --window."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import anyio.to_thread
import httpx
from pydantic import BaseModel, Field

from vllm_tune.tools.diagnose.snapshot import parse_snapshot
from vllm_tune.tools.diagnose.timing import capture_header
from vllm_tune.tools.errors import BadInputError, TargetError
from vllm_tune.tools.net.http import fetch_text, http_client
from vllm_tune.tools.net.targets import TargetPolicy

BEFORE, AFTER, META = "before.prom", "after.prom", "capture.json"
MAX_WINDOW_S = 3600.0


class CaptureResult(BaseModel):
    url: str
    window_s: float = Field(description="seconds between the two scrapes, measured (midpoints of each request)")
    before_unix: float
    after_unix: float
    before: str = Field(description="path of the earlier scrape")
    after: str = Field(description="path of the later scrape")
    meta: str = Field(description="path of capture.json")


async def _scrape(client: httpx.Client, url: str) -> tuple[str, float]:
    t0 = time.time()
    text = await anyio.to_thread.run_sync(lambda: fetch_text(client, url, what="metrics"))
    stamp = (t0 + time.time()) / 2
    try:
        parse_snapshot(text, url)
    except BadInputError as exc:
        raise TargetError(f"{url} did not return vLLM metrics: {exc}") from None
    return text, stamp


async def capture(url: str, window_s: float, out_dir: Path, *, policy: TargetPolicy | None = None) -> CaptureResult:
    """Scrape `url`/metrics now and `window_s` later; write before.prom, after.prom (each dated by a comment
    first line) and capture.json into `out_dir`. Sends no load."""
    if not 0 < window_s <= MAX_WINDOW_S:
        raise BadInputError(f"--window must be between 0 and {MAX_WINDOW_S:g} seconds, got {window_s:g}")
    pol = policy or TargetPolicy.from_env()
    base = pol.check(url)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"cannot create {out_dir}: {exc.strerror or exc}") from None
    metrics = f"{base}/metrics"
    with http_client(pol) as client:
        before, t_before = await _scrape(client, metrics)
        await anyio.sleep(max(0.0, window_s - (time.time() - t_before)))
        after, t_after = await _scrape(client, metrics)
    return write_capture(out_dir, base, (before, t_before), (after, t_after), written_by="vllm-tune capture")


def write_capture(out_dir: Path, url: str, before: tuple[str, float], after: tuple[str, float], *,
                  written_by: str) -> CaptureResult:
    """before.prom and after.prom (each dated by its first line) and capture.json, the layout diagnose reads a
    window from; `before`/`after` are (exposition text, unix time of the scrape). run_benchmark writes its
    measured window the same way, so a run can be diagnosed again later."""
    (text_before, t_before), (text_after, t_after) = before, after
    paths = {name: out_dir / name for name in (BEFORE, AFTER, META)}
    result = CaptureResult(url=url, window_s=round(t_after - t_before, 3), before_unix=round(t_before, 3),
                           after_unix=round(t_after, 3), before=str(paths[BEFORE]), after=str(paths[AFTER]),
                           meta=str(paths[META]))
    meta = {"url": url, "window_s": result.window_s, "before_unix": result.before_unix,
            "after_unix": result.after_unix, "files": {"before": BEFORE, "after": AFTER},
            "written_by": written_by}
    try:
        paths[BEFORE].write_text(capture_header(t_before, url) + text_before, encoding="utf-8")
        paths[AFTER].write_text(capture_header(t_after, url) + text_after, encoding="utf-8")
        paths[META].write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise BadInputError(f"cannot write into {out_dir}: {exc.strerror or exc}") from None
    return result


def captured_window(files: list[str]) -> float | None:
    """The window `vllm-tune capture` (or the sample recorder) measured, from the capture.json beside the two
    files, when the files are the ones it names."""
    if len(files) != 2:
        return None
    paths = [Path(f).resolve() for f in files]
    meta_path = paths[0].parent / "capture.json"
    if paths[1].parent != paths[0].parent or not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    named = meta.get("files") or {"before": "before.prom", "after": "after.prom"}
    window = meta.get("window_s")
    if not isinstance(named, dict) or [p.name for p in paths] != [named.get("before"), named.get("after")]:
        return None
    return float(window) if isinstance(window, int | float) and window > 0 else None
