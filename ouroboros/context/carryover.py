"""Which messages of an ending session start the next one.

A turn runs from a user (or injected) message, through the assistant's tool calls and all their
results, to the assistant's next reply without tool calls or the session's end. Carry-over takes
the last complete turns and always leaves every tool call with exactly its results.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ouroboros.context.mask import masked
from ouroboros.messages import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage

_NOT_CARRIED = ("restart", "wind_down")
"""The old restart marker (the next session gets its own) and the wind-down request (it would end
the new session at once). Both always follow a tool result or a user message, so dropping them
never leaves two assistant messages in a row, which llama-server rejects."""


def settled(messages: Sequence[Message]) -> list[Message]:
    """Drop a trailing assistant message whose tool calls did not all get results."""
    result = list(messages)
    for index in range(len(result) - 1, -1, -1):
        message = result[index]
        if isinstance(message, AssistantMessage):
            wanted = {c.id for c in message.tool_calls}
            got = {m.tool_call_id for m in result[index + 1 :] if isinstance(m, ToolMessage)}
            return result if wanted <= got else result[:index]
    return result


def _shrink_results(
    messages: Sequence[Message],
    budget_tokens: int,
    min_tokens: int,
    tokens: Callable[[Message], int],
    keep_newest: bool,
) -> list[Message]:
    """Placeholders for big results, oldest first, until the messages fit (or none is left)."""
    result = list(messages)
    results = [i for i, m in enumerate(result) if isinstance(m, ToolMessage)]
    if keep_newest and results:
        results.pop()
    total = sum(tokens(m) for m in result)
    for index in results:
        if total <= budget_tokens:
            break
        message = result[index]
        if tokens(message) > min_tokens:
            result[index] = masked(message)  # type: ignore[arg-type]
            total += tokens(result[index]) - tokens(message)
    return result


def select_carryover(
    history: Sequence[Message],
    max_turns: int,
    budget_tokens: int,
    tokens: Callable[[Message], int],
    min_mask_tokens: int = 100,
) -> list[Message]:
    """The last `max_turns` complete turns that fit `budget_tokens`, shrunk if they do not.

    Shrinking goes: fewer turns; then, within the last turn (or the whole session if no turn
    ever started), the longest suffix that fits once its older big results are placeholders,
    keeping the newest result whole; at last the final step with every result a placeholder.
    """
    if max_turns <= 0:
        return []
    messages = settled(
        [
            m
            for m in history
            if not isinstance(m, SystemMessage)
            and not (isinstance(m, UserMessage) and m.origin in _NOT_CARRIED)
        ]
    )

    def size(ms: Sequence[Message]) -> int:
        return sum(tokens(m) for m in ms)

    turns = [i for i, m in enumerate(messages) if isinstance(m, UserMessage)]
    if messages and turns[:1] != [0]:
        # The session's first turn began with the restart marker, which is not carried.
        turns.insert(0, 0)
    for start in turns[-max_turns:]:  # earliest first: the most turns that fit
        if size(messages[start:]) <= budget_tokens:
            return messages[start:]
    first = turns[-1] if turns else 0
    starts = [first] + [
        i for i, m in enumerate(messages) if i > first and isinstance(m, AssistantMessage)
    ]
    for keep_newest in (True, False):
        for start in starts:
            shrunk = _shrink_results(
                messages[start:], budget_tokens, min_mask_tokens, tokens, keep_newest
            )
            if size(shrunk) <= budget_tokens:
                return shrunk
    return []


def _brief(arguments: str) -> str:
    try:
        values = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments[:60]
    if not isinstance(values, dict):
        return arguments[:60]
    main = values.get("command") or values.get("path") or values.get("query") or ""
    text = " ".join(str(main).split())
    return text if len(text) <= 60 else text[:59] + "…"


def recent_actions(history: Sequence[Message], count: int) -> list[str]:
    """The last `count` tool calls with how they ended, oldest first: the ambient summary."""
    if count <= 0:
        return []
    results = {m.tool_call_id: m for m in history if isinstance(m, ToolMessage)}
    actions: list[str] = []
    for message in reversed(history):
        if not isinstance(message, AssistantMessage):
            continue
        for call in reversed(message.tool_calls):
            result = results.get(call.id)
            if result is None:
                outcome = "no result"
            elif result.exit_code is not None:
                outcome = f"exit {result.exit_code}"
            else:
                outcome = "error" if result.content.startswith("error:") else "ok"
            actions.append(f"{call.name} {_brief(call.arguments)} → {outcome}".replace("  ", " "))
            if len(actions) == count:
                return actions[::-1]
    return actions[::-1]
