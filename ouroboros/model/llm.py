"""The model client: one chat completion streamed from any OpenAI-compatible server, read into
a `Completion`, and its failures classified (the transient ones are retried by `retry.py`).

LLMError
 ├── TransientError    connection, timeout, 408/409/429, 5xx, stream cut: retried with backoff
 ├── ContextOverflow   the prompt does not fit (every server's wording): never retried unchanged
 └── FatalError        401/403, model not found, other bad requests: the run stops

Every response body is stopped at `llm.max_reply_bytes` (`byte_limit.py`): a reply cut at the
limit is taken as one stopped at `max_tokens`.

"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio
import openai

from ouroboros.context.ledger import Rejected
from ouroboros.ground.config import LLMSettings
from ouroboros.ground.figures import window_tokens
from ouroboros.ground.messages import AssistantMessage, Message, ToolCall, ToolMessage
from ouroboros.model.byte_limit import ReplyTooLarge, limited_client


class LLMError(Exception):
    """Base of everything the model client raises."""


class TransientError(LLMError):
    """Worth retrying as it is: the server may be back or less busy later."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds the server asked to wait (`Retry-After`), if it said."""


class StoodStill(TransientError):
    """A reply (or a discovery answer) stood still past `llm.timeout_s`: the server is stuck (a
    managed one is killed and started again)."""


class Unreachable(TransientError):
    """Nothing answers at the server's address (no one listens, an unknown host): not yet
    started, most often."""


class FatalError(LLMError):
    """Retrying cannot help; a person has to change something."""


class ContextOverflow(LLMError):
    """The server refused the prompt as too long for its window."""

    def __init__(self, message: str, n_prompt_tokens: int | None = None, n_ctx: object = None):
        super().__init__(message)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = window_tokens(n_ctx)
        """The window the server said it runs with (`stated_window`), if it said one."""
        self.no_window = None if self.n_ctx is not None else n_ctx
        """What it said instead, a figure that is no window (None: it said none)."""


class Model(Protocol):
    """What a session asks of a model: the streaming client (`LLMClient`) is one; tests and
    benches drive others from functions."""

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> Completion:
        """One reply to `messages`, or an `LLMError`."""
        ...


# Overflow wordings of llama-server, vLLM, LM Studio, Ollama and OpenAI (the project's
# ../shared/reference/servers.md, section 7).
_OVERFLOW_PATTERNS = re.compile(
    "|".join(
        [
            r"exceeds the available context size",
            r"context size has been exceeded",
            r"maximum context length is",
            r"you passed \d+ input (tokens|characters)",
            r"resulting in a maximum input length",
            r"your request has \d+ input tokens",
            r"n_keep: \d+\s*>= n_ctx",
            r"context length of only",
            r"mid-generation context overflow",
            r"prompt is longer than the context length",
            r"input length exceeds the context length",
            r"context_length_exceeded",
            r"larger than the max context size",
        ]
    ),
    re.IGNORECASE,
)


# The window a refusal states, in each server's words (servers.md, sections 2 to 4): llama-server
# (and its embedding variant), vLLM now and before, LM Studio's n_ctx, its older wording and its
# mid-generation one. Ollama's refusal names no figure: its window comes from `/api/ps`.
_STATED_WINDOW = re.compile(
    "|".join(
        [
            r"exceeds the available context size \((\d{1,20}) tokens\)",
            r"larger than the max context size \((\d{1,20}) tokens\)",
            r"the model's context length is only (\d{1,20}) tokens",
            r"maximum context length is (\d{1,20}) tokens",
            r"n_keep: \d+\s*>=\s*n_ctx: (\d{1,20})\)",
            r"loaded with context length of only (\d{1,20}) tokens",
            r"reached context length of (\d{1,20}) tokens",
        ]
    ),
    re.IGNORECASE,
)


def stated_window(text: str) -> int | None:
    """The figure a refusal's text states as the server's window, as written (whether it is a
    window is `window_tokens`'s to say), or None."""
    found = _STATED_WINDOW.search(text)
    return int(next(group for group in found.groups() if group)) if found else None


def _body_text(body: object) -> str:
    return body if isinstance(body, str) else json.dumps(body, default=str)


def overflow_from(status: int | None, body: object, message: str) -> ContextOverflow | None:
    """Recognise a context-overflow answer of any known server, or None."""
    text = f"{message} {_body_text(body)}"
    if isinstance(body, dict):
        kind = body.get("type") or body.get("code")
        if kind in ("exceed_context_size_error", "context_length_exceeded"):
            stated = body.get("n_ctx")
            if window_tokens(stated) is None:  # its text may state one
                said = stated_window(text)
                stated = stated if said is None else said
            return ContextOverflow(
                str(body.get("message") or message), count(body.get("n_prompt_tokens")), stated
            )
    if status not in (None, 200, 400, 413, 422, 500) or not _OVERFLOW_PATTERNS.search(text):
        return None
    prompt = re.search(r"request \((\d{1,9}) tokens\) exceeds the available context size", text)
    return ContextOverflow(message, int(prompt[1]) if prompt else None, stated_window(text))


def classify(error: Exception) -> LLMError:
    """Turn an openai-client exception into our hierarchy."""
    if isinstance(error, LLMError):
        return error
    if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
        unreachable = not isinstance(error, openai.APITimeoutError)  # a timeout: it is slow
        return (Unreachable if unreachable else TransientError)(
            f"cannot reach the model server: {error}"
        )
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        overflow = overflow_from(status, error.body, error.message)
        if overflow:
            return overflow
        if status in (401, 403):
            return FatalError(f"the server refused the API key (HTTP {status}): {error.message}")
        if status == 404:
            return FatalError(f"model or endpoint not found (HTTP 404): {error.message}")
        if status in (408, 409, 429) or status >= 500:
            return TransientError(f"HTTP {status}: {error.message}", _retry_after(error))
        return FatalError(f"the server rejected the request (HTTP {status}): {error.message}")
    if isinstance(error, openai.APIError):  # an error event inside an HTTP-200 stream
        overflow = overflow_from(None, error.body, error.message)
        return overflow or TransientError(f"error inside the stream: {error.message}")
    raise error


def _retry_after(error: openai.APIStatusError) -> float | None:
    """`Retry-After` in seconds (a number; an HTTP date is left to the backoff)."""
    value = error.response.headers.get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


# --- The stream, chunk by chunk, into one `Completion`: its text, its tool calls (whole in one
# chunk, as Ollama sends them, or in fragments by index), its finish reason and the server's
# figures (usage, llama-server's `timings`, the prompt cache).
#
# Which token figures a server sends can be believed: its usage is JSON, and may hold any value.
# A figure that is no whole, non-negative number (a string, a float, NaN, a bool, null where a
# number belongs) is no count; a prompt or a reply larger than the whole window cannot have
# happened. Such figures are ignored, the run warns once
# per kind, and the calibrated estimate stands in: believed, they would move the window's lines
# (a restart every few turns) and flag a silent truncation that did not happen.


def count(value: object) -> int | None:
    """A token count, if `value` is one: a whole number, not negative, not a bool."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def duration_ms(value: object) -> float | None:
    """A finite, non-negative number of milliseconds, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def shown(value: object) -> str:
    """A figure as a warning quotes it: short, whatever it is."""
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


ReportedBy = Literal["server", "timings"]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    source: ReportedBy


@dataclass(frozen=True)
class Prefill:
    """How much of the prompt the server took from its prompt cache, and what the rest cost.
    None where the server does not say (Ollama before cached-token details, LM Studio, vLLM
    without `--enable-prompt-tokens-details`)."""

    cached_tokens: int | None = None
    processed_tokens: int | None = None
    prefill_ms: float | None = None


@dataclass(frozen=True)
class Completion:
    message: AssistantMessage
    finish_reason: str
    usage: Usage | None
    """None when the server reported nothing; the ledger then estimates."""
    prefill: Prefill = Prefill()
    rejected: Rejected | None = None
    """Usage the server sent that is no count: ignored, the estimate used (`count`)."""
    calls_from_text: str | None = None
    """The format the reply's calls were read from its text in, when the server sent none
    (`model/tool_protocol.py`)."""
    unknown_tools: tuple[str, ...] = ()
    """Tools the reply called, as text, that there are not (`model/reply_reader.py`)."""
    written: str | None = None
    """The reply's text as the model wrote it, where the calls read from it were taken out."""


CUT = "ouroboros_cut_bytes"
"""The one key of the arguments that stand in for a call the reply was cut off in: one the byte
cap fell in (`StreamState.cut_in`), one whose arguments stop mid-way (`tool_protocol.admit`)."""
_NAMED_CALL = re.compile(rb'"tool_calls".{0,400}?"name"\s*:\s*"([\w.-]{1,64})"', re.DOTALL)


@dataclass
class _ToolCallBuilder:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def unfinished(arguments: str) -> bool:
    """Arguments that stop mid-way: no JSON (none at all is an empty object, as the tools read
    it). JSON that parses is whole; JSON too deep to read is not run anyway
    (`tool_protocol.admit`)."""
    try:
        json.loads(arguments or "{}")
    except ValueError:
        return True
    except RecursionError:
        return False
    return False


def _field(value: object, key: str) -> object:
    return value.get(key) if isinstance(value, dict) else None


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _text(value: object) -> str:
    """Arguments as text: sent as an object by some servers, as null by others."""
    if value is None or isinstance(value, str):
        return value or ""
    return json.dumps(value)


@dataclass
class StreamState:
    """A reply as its chunks arrive. Total over any JSON: a field of the wrong type counts as
    absent (the openai client checks no types), so nothing a server sends raises here."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _ToolCallBuilder] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: Usage | None = None
    prefill: Prefill = Prefill()
    rejected: Rejected | None = None
    """Usage the server sent that is no count (see `count`)."""
    progress: int = 0
    """Chunks that moved the reply on (text, a call's part, the finish), not keep-alives."""

    def add_chunk(self, chunk: object) -> None:
        self._usage(_field(chunk, "usage"))
        self._timings(_field(chunk, "timings"))
        for choice in _list(_field(chunk, "choices")):
            delta = _field(choice, "delta")
            content = _field(delta, "content")
            if isinstance(content, str) and content:
                self.text.append(content)
                self.progress += 1
            for call in _list(_field(delta, "tool_calls")):
                self._call(call)
                self.progress += 1
            finish = _field(choice, "finish_reason")
            if isinstance(finish, str) and finish:
                self.finish_reason = finish
                self.progress += 1

    def _call(self, call: object) -> None:
        index, call_id = _field(call, "index"), _field(call, "id")
        if not isinstance(index, int) or isinstance(index, bool):
            # No usable index: a call with an id starts a new one, a fragment goes on the last.
            last = max(self.calls, default=-1)
            index = last + 1 if call_id or last < 0 else last
        builder = self.calls.setdefault(index, _ToolCallBuilder())
        builder.id = builder.id or (call_id if isinstance(call_id, str) else "")
        function = _field(call, "function")
        name = _field(function, "name")
        builder.name = builder.name or (name if isinstance(name, str) else "")
        builder.arguments.append(_text(_field(function, "arguments")))

    def cut_in(self, head: bytes, size: int) -> None:
        """The byte cap fell `size` bytes into an event begun with `head`: one that starts a
        tool call (a whole call in one chunk, as Ollama sends it) is kept as a call cut there."""
        named = _NAMED_CALL.search(head)
        last = self.calls[max(self.calls)] if self.calls else None
        if last is not None and unfinished("".join(last.arguments)):
            return  # the cap fell in a call sent in parts: that call is the one cut
        if named is not None:
            stand_in = json.dumps({CUT: size})
            call = _ToolCallBuilder(name=named[1].decode(), arguments=[stand_in])
            self.calls[max(self.calls, default=-1) + 1] = call

    def _usage(self, usage: object) -> None:
        raw_prompt = _field(usage, "prompt_tokens")
        if not raw_prompt:
            return  # Never trust a 0 prompt count: old Ollama reported 0 on a cache hit.
        raw_completion = _field(usage, "completion_tokens") or 0
        prompt, completion = count(raw_prompt), count(raw_completion)
        if prompt is None or completion is None:
            detail = f"prompt_tokens {shown(raw_prompt)}, completion_tokens {shown(raw_completion)}"
            self.rejected = Rejected("not_a_count", detail)
            return
        self.usage = Usage(prompt, completion, "server")
        cached = count(_field(_field(usage, "prompt_tokens_details"), "cached_tokens"))
        if cached is not None and cached <= prompt and self.prefill.cached_tokens is None:
            self.prefill = Prefill(cached, prompt - cached)

    def _timings(self, timings: object) -> None:
        """llama-server's own account of this request's prefill: exact, and timed."""
        if not isinstance(timings, dict) or "prompt_n" not in timings:
            return
        raw = [timings.get(key) for key in ("cache_n", "prompt_n", "predicted_n")]
        cached, processed, predicted = (count(0 if v is None else v) for v in raw)
        if cached is None or processed is None or predicted is None:
            detail = "timings " + ", ".join(shown(v) for v in raw)
            self.rejected = Rejected("not_a_count", detail)
            return
        self.timings = Usage(processed + cached, predicted, "timings")
        self.prefill = Prefill(cached, processed, duration_ms(timings.get("prompt_ms")))

    def completion(self, finish_reason: str) -> Completion:
        calls = tuple(
            ToolCall(
                id=b.id or f"call_{i}_{secrets.token_hex(4)}",
                name=b.name,
                arguments="".join(b.arguments),
            )
            for i, b in sorted(self.calls.items())
        )
        message = AssistantMessage(content="".join(self.text), tool_calls=calls)
        usage = self.usage or self.timings
        return Completion(message, finish_reason, usage, self.prefill, self.rejected)


def to_wire(message: Message) -> dict[str, Any]:
    """The OpenAI chat-completions form of one message."""
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if isinstance(message, AssistantMessage):
        wire: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in message.tool_calls
            ]
        return wire
    return {"role": message.kind, "content": message.content}


class LLMClient:
    """One streamed chat completion per call; no retries here (see `retrying`)."""

    def __init__(self, settings: LLMSettings):
        self.settings = settings
        self.client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key,
            max_retries=0,
            timeout=settings.timeout_s,
            http_client=limited_client(settings.reply_byte_limit),
        )
        self.requests = 0

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> Completion:
        request: dict[str, Any] = {
            "model": self.settings.model,
            "messages": [to_wire(m) for m in messages],
            "max_tokens": self.settings.max_output_tokens,
            "temperature": self.settings.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            request["tools"] = tools
        if self.settings.seed is not None:
            request["seed"] = (self.settings.seed + self.requests) % 2**31
        self.requests += 1
        state = StreamState()
        s = self.settings
        # The client's timeout is per read: a server trickling empty chunks never trips it.
        idle = anyio.CancelScope(deadline=anyio.current_time() + s.timeout_s)
        try:
            with anyio.fail_after(s.reply_timeout_s), idle:
                await self._stream(request, state, idle)
            if idle.cancelled_caught:
                raise StoodStill(
                    f"the reply did not move on for llm.timeout_s ({s.timeout_s:g} s): the "
                    "server is stuck, or too slow for it"
                )
        except TimeoutError:
            # Still moving, only too long: no sign the server is stuck (not `StoodStill`).
            raise TransientError(
                f"no whole reply within llm.reply_timeout_s ({s.reply_timeout_s:g} s): the "
                "server is stuck, or too slow for it"
            ) from None
        except ReplyTooLarge as e:
            # As a reply stopped at max_tokens: asking again would bring the same flood, while
            # a cut reply lets the run go on (its cut calls get error results, the agent is told).
            state.finish_reason = "length"
            state.cut_in(e.event_head, e.event_bytes)
        if state.finish_reason is None:
            raise TransientError("the stream ended without a finish reason (cut or server error)")
        return state.completion(state.finish_reason)

    async def _stream(
        self, request: dict[str, Any], state: StreamState, idle: anyio.CancelScope
    ) -> None:
        received = False
        stream: openai.AsyncStream[object] | None = None
        try:
            # Raw JSON, not the client's chunk models: they hold whatever the server sent.
            stream = await self.client.post(
                "/chat/completions",
                body=request,
                cast_to=object,
                stream=True,
                stream_cls=openai.AsyncStream[object],
            )
            # Read to the very end: usage arrives after the finish chunk.
            async for chunk in stream:
                moved = state.progress
                state.add_chunk(chunk)
                received = True
                if state.progress > moved:
                    idle.deadline = anyio.current_time() + self.settings.timeout_s
        except ValueError as e:  # not JSON, not UTF-8
            raise TransientError(f"the server sent a malformed stream: {e}") from None
        except RecursionError:  # JSON nested deeper than the parser reads
            raise TransientError(
                "the server sent a malformed stream: JSON nested too deeply"
            ) from None
        except openai.APIConnectionError as e:
            if received:  # not "cannot reach": it answered, then the connection dropped
                raise TransientError(f"the connection dropped in the middle of a reply: {e}") from e
            raise classify(e) from e
        except openai.OpenAIError as e:
            raise classify(e) from e
        finally:
            if stream is not None:
                with anyio.CancelScope(shield=True):
                    await stream.close()

    async def get_json(self, url: str) -> Any:
        """GET an absolute URL on the same server (discovery endpoints outside /v1)."""
        return await self._json(url, self.client.get(url, cast_to=object))

    async def post_json(self, url: str, body: dict[str, Any]) -> Any:
        return await self._json(url, self.client.post(url, body=body, cast_to=object))

    async def _json(self, url: str, answer: Awaitable[Any]) -> Any:
        # The client's timeout is per read: a server that trickles its answer would hold the
        # start (and every discovery) for ever without a deadline on the whole.
        limit = self.settings.timeout_s
        try:
            with anyio.fail_after(limit):
                return await answer
        except TimeoutError:
            raise StoodStill(f"no whole answer to {url} within {limit:g} s") from None
        except openai.OpenAIError as e:
            raise classify(e) from e
        except (ValueError, RecursionError):
            raise TransientError(f"the server's answer to {url} is not readable JSON") from None

    async def aclose(self) -> None:
        await self.client.close()
