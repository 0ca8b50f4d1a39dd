"""A streamed reply, chunk by chunk, into one `Completion`: its text, its tool calls (whole in
one chunk, as Ollama sends them, or in fragments by index), its finish reason and the server's
figures (usage, llama-server's `timings`, the prompt cache)."""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass, field
from typing import Literal

from ouroboros.context.ledger import Rejected
from ouroboros.ground.messages import AssistantMessage, ToolCall

# --- which figures a server sends can be believed ------------------------------------------
#
# Which token figures a server sends can be believed.
#
# A server's usage is JSON: it may hold any value. A figure that is no whole, non-negative number
# (a string, a float, NaN, a bool, null where a number belongs) is no count; a prompt or a reply
# larger than the whole window cannot have happened. Such figures are ignored, the run warns once
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
    """Usage the server sent that is no count: ignored, the estimate used (`chunks`)."""
    calls_from_text: str | None = None
    """The format the reply's calls were read from its text in, when the server sent none
    (`model/tool_protocol.py`)."""


CUT = "ouroboros_cut_bytes"
"""The one key of the arguments that stand in for a call the reply was cut off in: one the byte
cap fell in (`StreamState.cut_in`), one whose arguments stop mid-way (`run/reply_checks`)."""
_NAMED_CALL = re.compile(rb'"tool_calls".{0,400}?"name"\s*:\s*"([\w.-]{1,64})"', re.DOTALL)


@dataclass
class _ToolCallBuilder:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def unfinished(arguments: str) -> bool:
    """Arguments that stop mid-way: no JSON (none at all is an empty object, as the tools read
    it). JSON that parses is whole; JSON too deep to read is not run anyway
    (`run/reply_checks`)."""
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
    """Usage the server sent that is no count (see `chunks`)."""
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
