"""Stream one chat completion from any OpenAI-compatible server, and classify its failures.

LLMError
 ├── TransientError    connection, timeout, 408/409/429, 5xx, stream cut: retried with backoff
 ├── ContextOverflow   the prompt does not fit (every server's wording): never retried unchanged
 └── FatalError        401/403, model not found, other bad requests: the run stops
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable
from typing import Any, Protocol

import anyio
import openai

from ouroboros.ground.config import LLMSettings
from ouroboros.ground.messages import Message, to_wire
from ouroboros.model.chunks import Completion, Prefill, ReportedBy, StreamState, Usage, count
from ouroboros.model.reply_bytes import ReplyTooLarge, limited_client

__all__ = [
    "Completion",
    "ContextOverflow",
    "FatalError",
    "LLMClient",
    "LLMError",
    "Model",
    "Prefill",
    "ReportedBy",
    "TransientError",
    "Usage",
    "classify",
    "overflow_from",
    "stated_window",
]


class LLMError(Exception):
    """Base of everything the model client raises."""


class TransientError(LLMError):
    """Worth retrying as it is: the server may be back or less busy later."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds the server asked to wait (`Retry-After`), if it said."""


class Stalled(TransientError):
    """A reply stood still past `llm.timeout_s`, or had not ended within `llm.reply_timeout_s`:
    the server is stuck (a managed one is killed and started again)."""


class Unreachable(TransientError):
    """Nothing answers at the server's address (no one listens, an unknown host): not yet
    started, most often."""


class FatalError(LLMError):
    """Retrying cannot help; a person has to change something."""


class ContextOverflow(LLMError):
    """The server refused the prompt as too long for its window."""

    def __init__(self, message: str, n_prompt_tokens: int | None = None, n_ctx: int | None = None):
        super().__init__(message)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx
        """The window the server said it runs with (`stated_window`), if it said."""


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
            r"exceeds the available context size \((\d{1,9}) tokens\)",
            r"larger than the max context size \((\d{1,9}) tokens\)",
            r"the model's context length is only (\d{1,9}) tokens",
            r"maximum context length is (\d{1,9}) tokens",
            r"n_keep: \d+\s*>=\s*n_ctx: (\d{1,9})\)",
            r"loaded with context length of only (\d{1,9}) tokens",
            r"reached context length of (\d{1,9}) tokens",
        ]
    ),
    re.IGNORECASE,
)


def stated_window(text: str) -> int | None:
    """The window (tokens) a refusal's text says the server runs with, or None (at most nine
    digits: a longer figure is no window, and would not even convert)."""
    found = _STATED_WINDOW.search(text)
    window = int(next(group for group in found.groups() if group)) if found else 0
    return window or None


def _body_text(body: object) -> str:
    return body if isinstance(body, str) else json.dumps(body, default=str)


def overflow_from(status: int | None, body: object, message: str) -> ContextOverflow | None:
    """Recognise a context-overflow answer of any known server, or None."""
    text = f"{message} {_body_text(body)}"
    if isinstance(body, dict):
        kind = body.get("type") or body.get("code")
        if kind in ("exceed_context_size_error", "context_length_exceeded"):
            return ContextOverflow(
                str(body.get("message") or message),
                count(body.get("n_prompt_tokens")),
                count(body.get("n_ctx")) or stated_window(text),
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
        state = StreamState()
        s = self.settings
        # The client's timeout is per read: a server trickling empty chunks never trips it.
        idle = anyio.CancelScope(deadline=anyio.current_time() + s.timeout_s)
        try:
            with anyio.fail_after(s.reply_timeout_s), idle:
                await self._stream(request, state, idle)
            if idle.cancelled_caught:
                raise Stalled(
                    f"the reply did not move on for llm.timeout_s ({s.timeout_s:g} s): the "
                    "server is stuck, or too slow for it"
                )
        except TimeoutError:
            raise Stalled(
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
            raise Stalled(f"no whole answer to {url} within {limit:g} s") from None
        except openai.OpenAIError as e:
            raise classify(e) from e
        except (ValueError, RecursionError):
            raise TransientError(f"the server's answer to {url} is not readable JSON") from None

    async def aclose(self) -> None:
        await self.client.close()
