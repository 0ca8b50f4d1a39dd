"""The scripted server's wire: its HTTP handler and the SSE stream of one reply, in the shape of
the server it plays (`ScriptedServer.dialect`)."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ouroboros.model.scripted import Reply, ScriptedServer

TOKEN = re.compile(r"\w+|[^\w\s]")
_CALL_IDS = itertools.count(1)
Wire = Callable[["Stream"], None]
"""Writes a whole chat stream, headers sent (`Reply.wire`)."""


def count_tokens(body: dict[str, Any], renders_tools: bool = True) -> int:
    """A word-level stand-in for a real tokenizer: deliberately not bytes/4, so the harness's
    estimator has something to calibrate against. A template that cannot render tools drops
    their schemas (llama-server does so silently), so they cost nothing."""
    total = 0
    for message in body.get("messages", []):
        total += 4 + len(TOKEN.findall(str(message.get("content") or "")))
        for call in message.get("tool_calls") or []:
            total += 6 + len(
                TOKEN.findall(call["function"]["name"] + call["function"]["arguments"])
            )
    if body.get("tools") and renders_tools:
        total += len(TOKEN.findall(json.dumps(body["tools"])))
    return total


class Handler(BaseHTTPRequestHandler):
    owner: ScriptedServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: object, retry_after: str | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        payload = self.owner.native(self.path)
        if payload is None:
            error = {"message": "File Not Found", "type": "not_found_error", "code": 404}
            self._json(404, {"error": error})
        else:
            self._json(200, payload)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/api/generate":
            self._json(200, {"done": True})
        elif self.path == "/api/show":
            self._json(200, {"parameters": "", "model_info": {"test.context_length": 131072}})
        elif self.path == "/v1/chat/completions":
            self._chat(body)
        elif self.owner.endpoints and (answer := self.owner.endpoints(self.path, body)):
            self._json(200, answer)
        else:
            self._json(404, {"error": {"message": f"not found: {self.path}"}})

    def _chat(self, body: dict[str, Any]) -> None:
        owner = self.owner
        reply = owner.next_reply(body)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.wire is not None:
            stream = Stream(self, owner, body, reply, 0)
            stream.begin()
            try:
                reply.wire(stream)
            except OSError:
                self.close_connection = True  # the client hung up, as it should on a flood
            return
        if reply.status != 200:
            error = reply.error_body if reply.error_body is not None else {"message": "error"}
            self._json(reply.status, {"error": error}, reply.retry_after)
            return
        messages = body.get("messages", [])
        if (
            owner.dialect == "llama"
            and len(messages) >= 2
            and all(m.get("role") == "assistant" for m in messages[-2:])
        ):
            self._json(
                400,
                {
                    "error": {
                        "code": 400,
                        "type": "invalid_request_error",
                        "message": "Cannot have 2 or more assistant messages at the end of "
                        "the list.",
                    }
                },
            )
            return
        prompt, overflow = owner.fit(body)
        if overflow is not None:
            self._json(400, {"error": overflow})
            return
        Stream(self, owner, body, reply, prompt).send()


class Stream:
    def __init__(
        self,
        handler: Handler,
        owner: ScriptedServer,
        body: dict[str, Any],
        reply: Reply,
        prompt: int,
    ):
        self.h = handler
        self.owner = owner
        self.body = body
        self.reply = reply
        self.prompt = prompt
        self.base = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": owner.model,
        }

    def event(self, payload: object) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        data = f"data: {text}\n\n".encode()
        self.h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.h.wfile.flush()

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        self.event({**self.base, "choices": [choice], **extra})

    def begin(self) -> None:
        self.h.send_response(200)
        self.h.send_header("Content-Type", "text/event-stream")
        self.h.send_header("Transfer-Encoding", "chunked")
        self.h.end_headers()

    def send(self) -> None:
        reply = self.reply
        self.begin()
        llama = self.owner.dialect == "llama"
        self.chunk({"role": "assistant", "content": None if llama else ""})
        for start in range(0, len(reply.text), 7):
            self.chunk({"content": reply.text[start : start + 7]})
        time.sleep(reply.stall_s)
        if reply.stream_error is not None:
            self.event({"error": reply.stream_error})
            self.end()
            return
        self.tool_calls()
        if reply.cut:
            self.end(done=False)
            return
        completion = reply.completion_tokens
        if completion is None:
            completion = len(TOKEN.findall(reply.text)) + sum(
                6 + len(TOKEN.findall(json.dumps(a))) for _, a in reply.tool_calls
            )
        finish = "tool_calls" if reply.tool_calls else "stop"
        limit = self.body.get("max_tokens")
        if isinstance(limit, int) and completion >= limit:
            completion, finish = limit, "length"  # stopped at max_tokens, as the real servers do
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else self.prompt
        dialect = self.owner.dialect
        new_only = dialect == "ollama" and self.owner.ollama_version == "0.30.0"
        cached = min(self.owner.cached_prefix(self.body), prompt)
        if new_only:
            prompt -= cached
        # No `prompt_ms`: this server has no prefill to time, and a made-up time would be
        # shown as if measured (the client logs none, and the lines show none).
        timings = {"cache_n": cached, "prompt_n": prompt - cached, "predicted_n": completion}
        wants_usage = (self.body.get("stream_options") or {}).get("include_usage")
        send_usage = bool(reply.usage and wants_usage)
        # llama-server: timings ride on the usage chunk when there is one, else on the finish.
        extra = {"timings": timings} if llama else {}
        self.chunk({}, finish, **({} if send_usage else extra))
        if send_usage:
            usage: dict[str, Any] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            if dialect in ("llama", "vllm"):  # vLLM: with --enable-prompt-tokens-details
                usage["prompt_tokens_details"] = {"cached_tokens": cached}
            self.event({**self.base, "choices": [], "usage": usage, **extra})
        with self.owner._lock:
            figures = {"prompt_tokens": prompt, "completion_tokens": completion}
            self.owner.reported.append(figures | {"cached_tokens": cached})
        self.end()

    def tool_calls(self) -> None:
        for index, (name, arguments) in enumerate(self.reply.tool_calls):
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
            ids = self.reply.call_ids
            call_id = ids[index] if index < len(ids) else f"call_{next(_CALL_IDS):08d}"
            head = {"index": index, "id": call_id, "type": "function"}
            if self.owner.dialect == "ollama":
                self.chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": raw}}]})
                continue
            self.chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
            for start in range(0, len(raw), 9):
                fragment = {"index": index, "function": {"arguments": raw[start : start + 9]}}
                self.chunk({"tool_calls": [fragment]})

    def end(self, done: bool = True) -> None:
        if done:
            self.event("[DONE]")
        self.h.wfile.write(b"0\r\n\r\n")
        self.h.wfile.flush()
        self.h.close_connection = True
