"""Request bodies and the SSE stream timer for vLLM's OpenAI endpoints (transport: transport.py).

Timing follows `vllm bench serve` so numbers are comparable: the clock starts just before the
request is handed to the connection pool, TTFT ends at the first event that carries choices, every
later event adds one inter-token gap, and the latency ends at the last token event (not at the
`[DONE]` sentinel). Events that arrive in one network read share one timestamp, as they would in
any client. For chat the role-only opening delta is not a token and is skipped.
Output tokens come from the server's usage block (`stream_options.include_usage`); when a server
sends none the text is kept and counted afterwards with the server's /tokenize.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from vllm_tune.tools.bench.records import RequestRecord

Endpoint = Literal["completions", "chat"]
# Events are UTF-8 by the SSE spec: decoding them directly skips json.loads' encoding sniffing, a
# measurable share of the per-token cost at thousands of events per second.
_decode_json = json.JSONDecoder().decode
ENDPOINT_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def build_body(endpoint: Endpoint, model: str, prompt: str | list[dict[str, str]], max_tokens: int, *,
               ignore_eos: bool, extra: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"model": model, "stream": True, "stream_options": {"include_usage": True}}
    if endpoint == "chat":
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        body["max_completion_tokens"] = max_tokens
    else:
        body["prompt"] = prompt
        body["max_tokens"] = max_tokens
    if ignore_eos:
        body["ignore_eos"] = True
    body["temperature"] = 0.0
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()


def auth_headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


class StreamTimer:
    """Parses the SSE byte stream of one request and records timings into `rec`."""

    __slots__ = ("_buf", "_chat", "_last", "_start", "rec", "texts")

    def __init__(self, rec: RequestRecord, chat: bool) -> None:
        self.rec = rec
        self._chat = chat
        self._buf = b""
        self._start = rec.start_time
        self._last = rec.start_time
        self.texts: list[str] = []

    def feed(self, data: bytes, now: float) -> None:
        buf = self._buf + data
        while True:
            cut = buf.find(b"\n\n")
            if cut < 0:
                break
            event, buf = buf[:cut], buf[cut + 2:]
            self._event(event, now)
        self._buf = buf

    def _event(self, event: bytes, now: float) -> None:
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue  # comments (pings), ids, event names
            payload = line[5:].strip()
            if payload == b"[DONE]" or not payload:
                continue
            data = _decode_json(payload.decode())
            choices = data.get("choices")
            if choices:
                first = choices[0]
                if self._chat:
                    delta = first.get("delta") or {}
                    text = delta.get("content")
                    if not text and "role" in delta and not delta.get("tool_calls") \
                            and not delta.get("reasoning_content") and not delta.get("reasoning"):
                        continue
                else:
                    text = first.get("text")
                rec = self.rec
                if rec.chunks == 0:
                    rec.ttft = now - self._start
                else:
                    rec.itl.append(now - self._last)
                self._last = now
                rec.chunks += 1
                if text:
                    self.texts.append(text)
            usage = data.get("usage")
            if usage:
                completion = usage.get("completion_tokens")
                if completion is not None:
                    self.rec.output_len = int(completion)
                    self.rec.usage_reported = True
                prompt = usage.get("prompt_tokens")
                if prompt is not None:
                    self.rec.prompt_len = int(prompt)

    def finish(self) -> None:
        rec = self.rec
        if rec.chunks:
            rec.success = True
            rec.latency = self._last - self._start
            if not rec.usage_reported:
                rec.text = "".join(self.texts)
        else:
            rec.error = rec.error or "no token event in the stream"


