"""A scripted model behind a real HTTP server on loopback, for tests and the demo.

It speaks OpenAI streaming chat completions the way the real servers do
(../shared/reference/servers.md):
- `ollama`: whole tool calls in one chunk, a separate finish chunk, a usage chunk with empty
  `choices` (only when asked), the native `/api/*` endpoints, and **silent truncation** of a
  prompt longer than its window (oldest messages dropped, the smaller count reported);
- `llama`: tool-call arguments in fragments, `timings` (with its prompt cache: `cache_n`) on the
  usage chunk or else the finish chunk, `/props` (with `chat_template_caps`), `finish_reason`
  "length" at `max_tokens`, and an HTTP 400 `exceed_context_size_error` for a prompt that does
  not fit, as llama-server does (checked against the real one in tests/test_real_server.py);
- `vllm` and `lmstudio`: their discovery endpoints and overflow errors (vLLM counts `max_tokens`
  against the window; LM Studio's error body is a plain string).
Every request body is recorded so tests can assert on what the harness sent.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from ouroboros.ground.config_file import to_toml
from ouroboros.model.cache_check import common_prefix

Dialect = Literal["ollama", "llama", "vllm", "lmstudio"]
"""Whose discovery endpoints, overflow errors and stream shapes the server plays
(../shared/reference/servers.md)."""


@dataclass
class Reply:
    """One scripted answer. Defaults make a plain text reply with honest usage."""

    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    status: int = 200
    error_body: dict[str, Any] | str | None = None
    """With a non-200 status: the JSON body to send."""
    cut: bool = False
    """End the stream after the content, with no finish chunk, no usage, no [DONE]."""
    stream_error: dict[str, Any] | None = None
    """An `{"error": ...}` event inside an HTTP-200 stream (older llama-server, LM Studio)."""
    usage: bool = True
    """Send usage at all (old servers did not)."""
    prompt_tokens: int | None = None
    """Report this instead of the real count (a lying or truncating server)."""
    completion_tokens: int | None = None
    delay_s: float = 0.0
    stall_s: float = 0.0
    """Pause this long in the middle of the stream, after the text (a reply cut short there)."""
    retry_after: str | None = None
    """With a non-200 status: the `Retry-After` header to send."""
    call_ids: tuple[str, ...] = ()
    """Ids for the tool calls, in order (else fresh ones are made up)."""
    wire: Wire | None = None
    """Send this stream instead (a broken or hostile server: `scripted_hostile`)."""


def quick_config(base_url: str, **sections: dict[str, Any]) -> str:
    """config.toml text for a run against a scripted server: fast retries, short replies."""
    config: dict[str, dict[str, Any]] = {
        "llm": {
            "base_url": base_url,
            "model": "scripted",
            "retry_initial_s": 0.05,
            "retry_max_s": 0.2,
            "retry_for_s": 5,
            "max_output_tokens": 256,
        },
        "session": {"shell_timeout_s": 10},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return to_toml(config)


def tool(name: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    return name, arguments


Responder = Callable[[dict[str, Any]], Reply]


def without_tools(answer: Responder, model: str = "gemma3:4b") -> Responder:
    """As Ollama answers for a model whose template has no tool support: a request carrying
    tools is refused (HTTP 400, in its words), the others are answered by `answer`."""

    def respond(body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return answer(body)
        message = f"registry.ollama.ai/library/{model} does not support tools"
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
        return Reply(status=400, error_body=error)

    return respond


Counter = Callable[[dict[str, Any]], int]
"""Prompt tokens of a request body (its `messages` and `tools`)."""
Endpoints = Callable[[str, dict[str, Any]], Any]


class QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-reply (a stopped run, a timeout the test asked for) is no
    error to print: a real server says nothing either."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ScriptedServer:
    def __init__(
        self,
        script: Iterable[Reply] | Responder = (),
        dialect: Dialect = "ollama",
        n_ctx: int | None = None,
        model: str = "scripted",
        renders_tools: bool = True,
        ollama_version: str = "0.33.0",
        counter: Counter | None = None,
        endpoints: Endpoints | None = None,
        swa_full: bool = True,
        hides_window: bool = False,
        says_window: object = None,
    ):
        self.dialect = dialect
        self.hides_window = hides_window
        """True: the discovery endpoints leave the window out (a proxy in front, an old build),
        so only a refusal says it."""
        self.says_window = says_window
        """What the discovery endpoints state as the window instead of `n_ctx`, when not None:
        a string, a float, 0, `true`, 10^12, as a broken or hostile server may (a test may
        change it while the run goes on)."""
        self.swa_full = swa_full
        """False: as llama-server runs a sliding-window model without `--swa-full`, a request
        that changes an earlier message is processed again from the start."""
        self.ollama_version = ollama_version
        """0.30.0 counts only the prompt tokens it had to process, as that release did."""
        self.n_ctx = n_ctx
        self.model = model
        self.renders_tools = renders_tools
        self.endpoints = endpoints
        """More POST endpoints (path, body -> answer or None): a replay gives llama-server's
        `/apply-template` and `/tokenize` of a real tokenizer."""
        self.count: Counter = counter or (lambda body: count_tokens(body, renders_tools))
        """How this server counts prompt tokens (default: word-level, `count_tokens`)."""
        self._previous_prompt: dict[str, Any] | None = None
        """The last request's messages: llama-server reuses their cached prefix."""
        self._responder: Responder | None = script if callable(script) else None
        self._queue: deque[Reply] = deque() if callable(script) else deque(script)
        self.requests: list[dict[str, Any]] = []
        self.reported: list[dict[str, int]] = []
        """The usage figures sent back, one per completed chat request."""
        self._resize: tuple[int, int] | None = None
        # Reentrant: a responder, called holding it, may ask `fit` as the server would.
        self._lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None
        self.port = 0

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self, port: int | None = None) -> str:
        server = self

        class ServerHandler(Handler):
            owner = server

        self._httpd = QuietServer(("127.0.0.1", port or self.port or 0), ServerHandler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        # A stop waits for the serving loop's next look (half a second by default, in every
        # test that starts this server).
        serve = partial(self._httpd.serve_forever, poll_interval=0.05)
        threading.Thread(target=serve, daemon=True).start()
        return self.url

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ScriptedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def resize(self, n_ctx: int, after: int) -> None:
        """The window becomes `n_ctx` once the `after`-th chat request was measured against the
        one before (the model reloaded or the server restarted with another window)."""
        with self._lock:
            self._resize = n_ctx, after

    def chat_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.requests)

    # --- behaviour ---------------------------------------------------------------------------

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            if self._responder is not None:
                return self._responder(body)
            if self._queue:
                return self._queue.popleft()
        return Reply(text="(the script has no more replies)")

    def fit(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str | None]:
        """Prompt tokens as this server would count them, or the error it would send."""
        tokens, n_ctx = self.count(body), self.n_ctx
        with self._lock:
            if self._resize is not None and len(self.requests) >= self._resize[1]:
                self.n_ctx, self._resize = self._resize[0], None  # from after this request
        reserve = int(body.get("max_tokens") or 0) if self.dialect == "vllm" else 0
        if n_ctx is None or tokens + reserve < n_ctx:
            return tokens, None
        if self.dialect == "llama":
            return tokens, {
                "code": 400,
                "message": f"request ({tokens} tokens) exceeds the available context size "
                f"({n_ctx} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": tokens,
                "n_ctx": n_ctx,
            }
        if self.dialect == "vllm":  # it counts max_tokens against the window
            return tokens, {
                "message": f"You passed {tokens} input tokens and requested {reserve} output "
                f"tokens. However, the model's context length is only {n_ctx} tokens, "
                f"resulting in a maximum input length of {n_ctx - reserve} tokens. Please "
                f"reduce the length of the input prompt. (parameter=input_tokens, value={tokens})",
                "type": "BadRequestError",
                "param": "input_tokens",
                "code": 400,
            }
        if self.dialect == "lmstudio":  # a plain string
            return tokens, (
                f"Trying to keep the first {tokens} tokens when context the overflows. However, "
                f"the model is loaded with context length of only {n_ctx} tokens, which is "
                "not enough. Try to load the model with a larger context length, or provide a "
                "shorter input"
            )
        # Ollama: drop the oldest non-system messages until it fits, keep the last one; say nothing.
        messages = list(body["messages"])
        while self.count({**body, "messages": messages}) >= n_ctx and len(messages) > 2:
            drop = next(i for i, m in enumerate(messages) if m.get("role") != "system")
            if drop == len(messages) - 1:
                break
            messages.pop(drop)
        return min(self.count({**body, "messages": messages}), n_ctx), None

    def cached_prefix(self, body: dict[str, Any]) -> int:
        """Tokens of the longest message prefix shared with the previous request (llama-server's
        prompt cache: `timings.cache_n`, `prompt_tokens_details.cached_tokens`)."""
        with self._lock:
            previous, self._previous_prompt = self._previous_prompt, body
        if previous is None or previous.get("tools") != body.get("tools"):
            return 0
        shared = common_prefix(previous["messages"], body["messages"])
        if not self.swa_full and shared < len(previous["messages"]):
            return 0
        return self.count({**body, "messages": body["messages"][:shared]})

    def native(self, path: str) -> dict[str, Any] | None:
        """The non-OpenAI endpoints each server has (context discovery), as servers.md has them."""
        window: object = None if self.hides_window else self.n_ctx or 4096
        if self.says_window is not None:
            window = self.says_window
        if path == "/v1/models":
            entry: dict[str, Any] = {"id": self.model, "object": "model"}
            if self.dialect == "vllm":
                entry["max_model_len"] = window
            return {"object": "list", "data": [entry]}
        if self.dialect == "llama":
            if path == "/props":
                return {
                    "default_generation_settings": {"n_ctx": window},
                    "total_slots": 1,
                    "chat_template_caps": {"supports_tools": self.renders_tools},
                    "build_info": "scripted",
                }
            if path == "/health":
                return {"status": "ok"}
            return None
        if self.dialect == "lmstudio" and path == "/api/v1/models":
            instance = {"id": self.model, "config": {"context_length": window}}
            model = {"key": self.model, "max_context_length": 131072}
            return {"models": [{**model, "loaded_instances": [instance]}]}
        if self.dialect != "ollama":
            return None
        if path == "/api/version":
            return {"version": self.ollama_version}
        if path == "/api/tags":
            return {"models": [{"name": self.model}]}
        if path == "/api/ps":
            return {"models": [{"name": self.model, "context_length": window}]}
        return None


# --- The wire: the HTTP handler and the SSE stream of one reply, in the shape of the server it
# plays (`ScriptedServer.dialect`).

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
