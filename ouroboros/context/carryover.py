"""Which messages of an ending session start the next one.

A turn runs from a user (or injected) message, through the assistant's tool calls and all their
results, to the assistant's next reply without tool calls or the session's end. Carry-over takes
the last complete turns and always leaves every tool call with exactly its results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ouroboros.context.mask import masked
from ouroboros.messages import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage

_NOT_CARRIED = ("restart",)
"""The previous restart marker: the next session gets its own. Other injected messages stay, as
dropping one could leave two assistant messages in a row, which llama-server rejects."""


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


def _valid_starts(messages: Sequence[Message]) -> tuple[list[int], list[int]]:
    """Indices where a carried suffix may start: turn starts, then any assistant message."""
    turns = [i for i, m in enumerate(messages) if isinstance(m, UserMessage)]
    steps = [i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)]
    return turns, steps


def _shrink_results(
    messages: Sequence[Message], min_tokens: int, tokens: Callable[[Message], int]
) -> list[Message]:
    return [
        masked(m) if isinstance(m, ToolMessage) and tokens(m) > min_tokens else m for m in messages
    ]


def select_carryover(
    history: Sequence[Message],
    max_turns: int,
    budget_tokens: int,
    tokens: Callable[[Message], int],
    min_mask_tokens: int = 100,
) -> list[Message]:
    """The last `max_turns` complete turns that fit `budget_tokens`, shrunk if they do not.

    Shrinking goes: fewer turns; then placeholders for big results in the last turn; then the
    largest valid suffix that fits. With no turn start at all, the largest valid suffix.
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

    turns, steps = _valid_starts(messages)
    for start in turns[-max_turns:]:  # earliest first: the most turns that fit
        if size(messages[start:]) <= budget_tokens:
            return messages[start:]
    last_turn = messages[turns[-1] :] if turns else messages
    shrunk = _shrink_results(last_turn, min_mask_tokens, tokens)
    if turns and size(shrunk) <= budget_tokens:
        return shrunk
    offset = len(messages) - len(shrunk)
    for start in steps:
        if start >= offset and size(shrunk[start - offset :]) <= budget_tokens:
            return shrunk[start - offset :]
    return []
