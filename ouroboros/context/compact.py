"""Compaction (optional): replace the older part of a session with a recap the model writes.

Pure pieces only: where to split, what to ask, what the recap looks like in the view. The
session makes the call, checks the result is really smaller, and falls back to masking.
"""

from __future__ import annotations

from collections.abc import Sequence

from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

RECAP_HEADER = "[State snapshot of the earlier part of this session, written by you]"

RECAP_INSTRUCTIONS = """\
The transcript above is the older part of your own working session; it is about to be removed \
from your context. Write a state snapshot that lets you continue without it, under exactly \
these headings:

## Overall goal
## Key knowledge
(facts, decisions, commands that work, pitfalls)
## Files touched and their state
## Recent actions
## Current plan

Be specific (paths, names, numbers) and brief. Write only the snapshot."""

RECAP_SYSTEM = "You summarise an agent's working session into a faithful state snapshot."


def split_point(
    history: Sequence[Message], start: int, raw: Sequence[int], keep_fraction: float
) -> int | None:
    """First kept index: the newest `keep_fraction` of the view's tokens stay, and the split
    falls before a user or assistant message, never between a tool call and its results.
    None when there is nothing older worth compacting."""
    total = sum(raw[start:])
    kept = 0
    index = len(history)
    while index > start and kept < total * keep_fraction:
        index -= 1
        kept += raw[index]
    while index > start and isinstance(history[index], ToolMessage):
        index -= 1  # back to the assistant message that made the calls
    if index < len(history) and isinstance(history[index], ToolMessage):
        return None
    return index if index > start + 1 else None


def transcript(messages: Sequence[Message], max_chars: int) -> str:
    """The older part as plain text for the recap call; its newest end wins if too long."""
    lines = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            calls = "".join(f"\n  → {c.name}({c.arguments})" for c in message.tool_calls)
            lines.append(f"[assistant] {message.content}{calls}")
        elif isinstance(message, ToolMessage):
            lines.append(f"[{message.name} result] {message.content}")
        elif isinstance(message, UserMessage):
            lines.append(f"[{message.origin}] {message.content}")
    text = "\n\n".join(lines)
    return text if len(text) <= max_chars else "[…earlier lines cut…]\n" + text[-max_chars:]


def recap_request(older: Sequence[Message], max_chars: int) -> list[Message]:
    return [
        SystemMessage(content=RECAP_SYSTEM),
        UserMessage(content=f"{transcript(older, max_chars)}\n\n---\n{RECAP_INSTRUCTIONS}"),
    ]


def recap_message(text: str) -> UserMessage:
    return UserMessage(content=f"{RECAP_HEADER}\n{text.strip()}", origin="compaction")
