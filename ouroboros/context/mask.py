"""Replace the oldest tool observations with short descriptive placeholders.

Masking is a view: the journal keeps every full result. No message is ever removed, so each tool
call keeps its result. Of the assistant's messages only one kind is shown shorter, at once: a
reply the server cut off at the output limit before any tool call (`cut_off_reply`), as its own
first words: nothing the harness writes stands in the assistant's place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ouroboros.context.plan import stays_whole
from ouroboros.context.truncate import saved_name
from ouroboros.ground.messages import AssistantMessage, Message, ToolMessage
from ouroboros.ground.prompts import DEAD_END_NOTE

ROUND_WORTH = 0.5
"""A masking round frees at least this share of what it makes the server process again, below
the hard line (`context.rounds`)."""
QUOTE_CHARS = 48
COMMAND_CHARS = 80
_HARNESS_LINES = ("exit code ", "[... ", "[lines ", DEAD_END_NOTE)
"""Lines the harness itself writes into a result: not what the output says."""


def _quote(line: str, limit: int = QUOTE_CHARS) -> str:
    line = " ".join(line.split())
    return json.dumps(line if len(line) <= limit else line[: limit - 1] + "…", ensure_ascii=False)


def _argument(message: ToolMessage, name: str) -> str:
    try:
        value = json.loads(message.arguments or "{}").get(name, "")
    except (json.JSONDecodeError, AttributeError):
        return ""
    return str(value)


def _unparsed(message: ToolMessage) -> str:
    try:
        json.loads(message.arguments or "{}")
    except json.JSONDecodeError:
        return message.arguments
    return ""


def _said(text: str) -> list[str]:
    """The output's own non-blank lines, without the harness's framing lines."""
    return [
        line for line in text.splitlines() if line.strip() and not line.startswith(_HARNESS_LINES)
    ]


def saved_path(message: ToolMessage) -> str:
    """Where the whole result can be read again: the file the tool runner saved, else the file
    the session writes from the journal when it masks the result (named by its content)."""
    return message.saved_to or saved_name(message.name, message.content)


def placeholder(message: ToolMessage) -> str:
    """What the model sees instead of a masked result: what it was, how it ended, how big, its
    first and last lines, and where to read it again."""
    text = message.content
    size = message.output_bytes if message.output_bytes is not None else len(text.encode())
    lines = message.output_lines if message.output_lines is not None else len(text.splitlines())
    said = _said(text)
    name = message.name
    if name == "file_read":
        what = _argument(message, "path")
        again = "read it again with file_read"
    else:
        # A call whose arguments are not JSON (cut at the output limit) is named by their start.
        command = " ".join((_argument(message, "command") or _unparsed(message)).split())
        what = f"{command[: COMMAND_CHARS - 1]}…" if len(command) > COMMAND_CHARS else command
        # `name`: the MCP tool an `mcp_call` called (its server is in the name).
        named = (_argument(message, key) for key in ("path", "query", "name"))
        what = f"`{what}`" if command else next((n for n in named if n), "")
        again = f"full text in {saved_path(message)}"
    parts = [what] if what else []
    if message.exit_code is not None:
        parts.append(f"exit {message.exit_code}")
    parts.append(f"{lines:,} lines, {size:,} bytes")
    if said:
        parts.append(f"first {_quote(said[0])}")
    if len(said) > 1:
        parts.append(f"last {_quote(said[-1])}")
    if not said:
        parts.append("no output")
    return f"[{name} result masked: {', '.join(parts)}; {again}]"


def masked(message: ToolMessage) -> ToolMessage:
    return message.model_copy(update={"content": placeholder(message), "masked": True})


CUT_OFF_KEPT_CHARS = 400
"""Of a reply cut off at the output limit before any call, what stays in the conversation: its
start, about a hundred tokens."""


def cut_off_reply(message: AssistantMessage) -> AssistantMessage:
    """A reply the server cut off at the output limit before any tool call, as the model sees
    it from the next request on: its own first words, cut at a line or a word. Such a reply is a
    thought the model writes again, shorter, when told it was cut off (a server stops the next at
    the same limit); kept whole it would take `max_output_tokens` of every later prompt, next to
    the reply that does the step. What the harness says of the cut goes in the user message that
    answers it: a note of the harness's in the assistant's place is copied by a small model
    into its every reply from then on. The journal keeps the reply whole."""
    text = message.content
    if len(text) <= CUT_OFF_KEPT_CHARS:
        return message
    kept = text[:CUT_OFF_KEPT_CHARS]
    for boundary in ("\n", " "):
        at = kept.rfind(boundary)
        if at > CUT_OFF_KEPT_CHARS // 2:
            kept = kept[:at]
            break
    return message.model_copy(update={"content": kept.rstrip()})


def apply_masks(messages: Sequence[Message], masked_ids: Collection[str]) -> list[Message]:
    """The view of `messages` with the results of `masked_ids` replaced by placeholders."""
    return [
        masked(m) if isinstance(m, ToolMessage) and m.tool_call_id in masked_ids else m
        for m in messages
    ]


@dataclass(frozen=True)
class MaskPolicy:
    protected_count: int
    """The newest tool results never masked..."""
    protected_tokens: int
    """...as long as together they stay under this many tokens (the newest one always is)."""
    min_tokens: int
    """Results this small are not worth a placeholder."""


def unseen_ids(messages: Sequence[Message]) -> set[str]:
    """Results after the last reply: the model has not been sent them yet."""
    unseen: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            break
        if isinstance(message, ToolMessage):
            unseen.add(message.tool_call_id)
    return unseen


def protected_ids(
    messages: Sequence[Message], policy: MaskPolicy, tokens: Callable[[Message], int]
) -> set[str]:
    """The protected results: every result the model has not seen yet, however many calls its
    last reply made; then the newest results, bounded in count and in tokens. A result that
    stays whole (a saved plan) is never masked anyway: it takes none of the places."""
    wholes = {m.tool_call_id for m in messages if isinstance(m, ToolMessage) and stays_whole(m)}
    protected = unseen_ids(messages) - wholes
    spent = 0
    for message in reversed(messages):
        if not isinstance(message, ToolMessage) or message.tool_call_id in wholes:
            continue
        cost = tokens(message)
        if message.tool_call_id not in protected:
            if len(protected) >= policy.protected_count or (
                protected and spent + cost > policy.protected_tokens
            ):
                break
            protected.add(message.tool_call_id)
        spent += cost
    return protected


def choose_masks(
    messages: Sequence[Message],
    already_masked: Collection[str],
    policy: MaskPolicy,
    tokens: Callable[[Message], int],
    excess: int,
    start: int = 0,
) -> list[str]:
    """Oldest-first results to mask so that at least `excess` tokens are reclaimed.

    `tokens` gives the (calibrated) size of a message; `start` lets a caller skip a prefix it
    knows holds no candidate any more.
    """
    if excess <= 0:
        return []
    protected = protected_ids(messages, policy, tokens)
    chosen: list[str] = []
    reclaimed = 0
    for message in messages[start:]:
        if reclaimed >= excess:
            break
        if (
            not isinstance(message, ToolMessage)
            or message.masked
            or message.tool_call_id in already_masked
            or message.tool_call_id in protected
            or stays_whole(message)
        ):
            continue
        saving = tokens(message) - tokens(masked(message))
        if tokens(message) <= policy.min_tokens or saving <= 0:
            continue
        chosen.append(message.tool_call_id)
        reclaimed += saving
    return chosen


def worth_a_round(freed: int, processed_again: int) -> bool:
    """A server with a prompt cache processes again everything from the first result a round
    masks (the cache ends where the prompt first changes): a round that frees little for that
    waits, and the results it would mask join a larger round later, at one break."""
    return freed >= ROUND_WORTH * processed_again


def round_waits_below(line: int, hard_line: int) -> int:
    """The prompt size up to which a round past `line` waits until it is worth its break: the
    hard line. Past it room comes first, as a session that ends early costs a restart and some
    of the model's thread (`context.rounds`)."""
    return max(line, hard_line)
