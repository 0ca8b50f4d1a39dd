"""Layer 2: replace the oldest tool observations with short descriptive placeholders.

Masking is a view: the journal keeps every full result. No message is ever removed, so each tool
call keeps its result; assistant messages are never touched.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ouroboros.messages import Message, ToolMessage


def _quote(line: str, limit: int = 48) -> str:
    line = line.strip()
    return json.dumps(line if len(line) <= limit else line[: limit - 1] + "…", ensure_ascii=False)


def _argument(message: ToolMessage, name: str) -> str:
    try:
        value = json.loads(message.arguments or "{}").get(name, "")
    except (json.JSONDecodeError, AttributeError):
        return ""
    return str(value)


def placeholder(message: ToolMessage) -> str:
    """What the model sees instead of a masked result: enough to know what it was and refetch it."""
    text = message.content
    lines = text.splitlines() or [""]
    size = len(text.encode())
    name = message.name
    if name == "file_read":
        detail = f"{_argument(message, 'path')}, {len(lines):,} lines, starts {_quote(lines[0])}"
    elif name == "shell_exec":
        code = "?" if message.exit_code is None else message.exit_code
        detail = f"exit {code}, {size:,} bytes, last line {_quote(lines[-1])}"
    elif name == "list_dir":
        detail = f"{_argument(message, 'path') or '.'}, {len(lines):,} entries"
    else:
        detail = f"{size:,} bytes, starts {_quote(lines[0])}"
    return f"[{name} result masked: {detail}]"


def masked(message: ToolMessage) -> ToolMessage:
    return message.model_copy(update={"content": placeholder(message), "masked": True})


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


def protected_ids(
    messages: Sequence[Message], policy: MaskPolicy, tokens: Callable[[Message], int]
) -> set[str]:
    """The protected window: newest results first, bounded in count and in tokens."""
    protected: set[str] = set()
    spent = 0
    for message in reversed(messages):
        if len(protected) >= policy.protected_count:
            break
        if isinstance(message, ToolMessage):
            cost = tokens(message)
            if protected and spent + cost > policy.protected_tokens:
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
            or message.tool_call_id in already_masked
            or message.tool_call_id in protected
        ):
            continue
        saving = tokens(message) - tokens(masked(message))
        if tokens(message) <= policy.min_tokens or saving <= 0:
            continue
        chosen.append(message.tool_call_id)
        reclaimed += saving
    return chosen
