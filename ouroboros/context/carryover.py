"""Which messages of an ending session start the next one.

The unit is the step: one reply of the agent with the results of all its tool calls, and the
harness's messages that answered it (a "continue" after a text-only reply, a nudge). A harness
message never starts a step, so it is never carried alone. The last step is always carried,
results included, also those the model never saw (the session may end right after the tools
ran): they are the newest facts the agent has; when its reply has no tool call, the step whose
results that reply reasons about is carried with it. Its results are cut to fit, and masked
where a cut cannot fit (a cut keeps at least its marker); only a step that does not fit even
with every result a placeholder (thousands of calls) is left out, with all before it, so the
next session can start.
Earlier steps follow as room allows, their results as placeholders before a step is dropped.
Every tool call keeps exactly its results.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ouroboros.context.mask import masked
from ouroboros.context.plan import stays_whole
from ouroboros.context.truncate import MARKER_ALLOWANCE, saved_name, shown
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

Step = list[Message]
Tokens = Callable[[Message], int]

_NOT_CARRIED = ("restart", "wind_down")
"""The old restart marker (the next session gets its own) and the wind-down request (it would end
the new session at once). Both always follow a tool result or a user message, so dropping them
never leaves two assistant messages in a row, which llama-server rejects."""
SHRINK_TRIES = 8
"""Tries to cut the last step's results to the room, each aiming a little lower: tokens per byte
differ along an output, so a proportional cut may miss."""


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


def steps(history: Sequence[Message]) -> list[Step]:
    """The session's complete steps, oldest first. Messages before the first reply (the opening,
    a user's task) start the first step."""
    kept = settled(
        [
            m
            for m in history
            if not isinstance(m, SystemMessage)
            and not (isinstance(m, UserMessage) and m.origin in _NOT_CARRIED)
        ]
    )
    result: list[Step] = []
    lead: Step = []
    for message in kept:
        if isinstance(message, AssistantMessage):
            result.append([*lead, message])
            lead = []
        elif result:
            result[-1].append(message)
        elif not (isinstance(message, UserMessage) and message.origin != "user"):
            lead.append(message)  # a person's message before any reply; harness ones are not
    return result


def _size(messages: Sequence[Message], tokens: Tokens) -> int:
    return sum(tokens(m) for m in messages)


def whole(message: Message) -> Message:
    """A result as a session with room shows it: at the run's normal cap, not cut for room."""
    if isinstance(message, ToolMessage) and message.room_bytes is not None:
        return message.model_copy(update={"room_bytes": None})
    return message


def _level(sizes: Sequence[int], allowed: int) -> int:
    """The largest L with sum(min(size, L)) <= allowed: cut the biggest results first."""
    level, left = 0, allowed
    for count, size in enumerate(sorted(sizes)):
        share = left // (len(sizes) - count)
        if size > share:
            return share
        level, left = size, left - size
    return max(level, left)


def _cut_to(message: ToolMessage, target: int, tokens: Tokens) -> ToolMessage:
    if tokens(message) <= target:
        return message
    size = len(shown(message).content.encode())
    cut = max(MARKER_ALLOWANCE, size * target // tokens(message))
    # The whole text is saved (by the caller) where the cut marker says.
    saved = message.saved_to or saved_name(message.name, message.content)
    return message.model_copy(update={"room_bytes": cut, "saved_to": saved})


def fit_step(step: Step, room: int, tokens: Tokens) -> Step:
    """The step whole if it fits `room`; else its results cut (head and tail, as the tool cap
    cuts) to share what the rest of the step leaves, the biggest cut first. Never dropped."""
    wholes = [whole(m) for m in step]
    results = [
        m for m in wholes if isinstance(m, ToolMessage) and not m.masked and not stays_whole(m)
    ]
    allowed = room - (_size(wholes, tokens) - _size(results, tokens))
    result = wholes
    for _ in range(SHRINK_TRIES):
        if _size(result, tokens) <= room or allowed <= 0:
            break
        level = _level([tokens(m) for m in results], allowed)
        cut = {id(m): _cut_to(m, level, tokens) for m in results}
        result = [cut.get(id(m), m) for m in wholes]
        allowed = allowed * 9 // 10  # tokens per byte vary along an output: aim a little lower
    return result


def _masking(step: Step, ids: set[str]) -> Step:
    return [masked(m) if isinstance(m, ToolMessage) and m.tool_call_id in ids else m for m in step]


def fit_or_mask(step: Step, room: int, tokens: Tokens) -> Step:
    """`fit_step`; where the step is still over `room` (a cut keeps at least its marker: a
    result of a few hundred bytes cannot be cut at all), its results masked, those a placeholder
    saves most on first, until it fits; then the others cut again to the room that frees. Fits
    whenever the step with every result a placeholder fits."""
    fitted = fit_step(step, room, tokens)
    total = _size(fitted, tokens)
    if total <= room:
        return fitted
    savings = sorted(
        (
            (tokens(m) - tokens(masked(m)), m.tool_call_id)
            for m in fitted
            if isinstance(m, ToolMessage) and not m.masked and not stays_whole(m)
        ),
        reverse=True,
    )
    ids: set[str] = set()
    for saving, call_id in savings:
        if total <= room or saving <= 0:
            break
        ids.add(call_id)
        total -= saving
    refitted = fit_step(_masking(step, ids), room, tokens)
    return refitted if _size(refitted, tokens) <= room else _masking(fitted, ids)


def _placeholders_oldest_first(
    earlier: list[Step], room: int, tokens: Tokens, min_tokens: int
) -> list[Message] | None:
    """The earlier steps within `room`, masking their results oldest first as needed."""
    messages = [m for step in earlier for m in step]
    total = _size(messages, tokens)
    for index, message in enumerate(messages):
        if total <= room:
            break
        if isinstance(message, ToolMessage) and not message.masked and not stays_whole(message):
            if tokens(message) > min_tokens:
                replacement = masked(message)
                total += tokens(replacement) - tokens(message)
                messages[index] = replacement
    return messages if total <= room else None


def _acts(step: Step) -> bool:
    return any(isinstance(m, AssistantMessage) and m.tool_calls for m in step)


def _least(messages: Sequence[Message]) -> list[Message]:
    """The messages with every result a placeholder: the least they can be carried as."""
    return [
        masked(m) if isinstance(m, ToolMessage) and not m.masked and not stays_whole(m) else m
        for m in messages
    ]


def last_steps(done: list[Step], capacity: int, tokens: Tokens) -> tuple[int, Step] | None:
    """Where the steps carried as the last one start, and their messages: the last step; when
    its reply has no tool call (the agent thinking aloud about what it just got), the step whose
    results it reasons about too, and the text-only replies between them as room allows (the
    oldest left out first), so the agent never wakes up reasoning about output it cannot see.
    The last step alone if the pair does not fit `capacity` even with its results placeholders;
    None if not even that."""
    first = len(done) - 1
    while first > 0 and not _acts(done[first]):
        first -= 1
    if first < len(done) - 1 and _acts(done[first]):
        between = done[first + 1 : -1]
        unit = [m for step in [done[first], *between, done[-1]] for m in step]
        while between and _size(unit, tokens) > capacity:
            between = between[1:]
            unit = [m for step in [done[first], *between, done[-1]] for m in step]
        if _size(_least(unit), tokens) <= capacity:
            return first, unit
    if _size(_least(done[-1]), tokens) <= capacity:
        return len(done) - 1, done[-1]
    return None


def select_carryover(
    history: Sequence[Message],
    max_steps: int,
    capacity: int,
    share: int,
    tokens: Tokens,
    min_mask_tokens: int = 100,
) -> list[Message]:
    """The last step (with the step a text-only last reply reasons about: `last_steps`), whole
    if it fits `capacity` (else its results cut to fit, masked where a cut cannot fit, else
    nothing at all); then as many of
    the `max_steps - 1` steps before it as fit the room left of `share` (or of the last step's
    own size, if that is more), their results masked oldest first before a step is dropped.

    `tokens` prices a message as the model is shown it (`context.truncate.shown`)."""
    done = steps(history)
    if max_steps <= 0 or not done:
        return []
    found = last_steps(done, capacity, tokens)
    if found is None:
        # Not even with every result a placeholder (thousands of calls): a session opened over
        # its budget could never make a turn. The restart marker still names the last actions.
        return []
    first, unit = found
    last = fit_or_mask(unit, capacity, tokens)
    used = _size(last, tokens)
    left = min(capacity, max(share, used)) - used
    earlier = [[whole(m) for m in step] for step in done[max(first - max_steps + 1, 0) : first]]
    while earlier:
        carried = _placeholders_oldest_first(earlier, left, tokens, min_mask_tokens)
        if carried is not None:
            return [*carried, *last]
        earlier = earlier[1:]
    return last


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
                outcome = "error" if result.error else "ok"
            actions.append(f"{call.name} {_brief(call.arguments)} → {outcome}".replace("  ", " "))
            if len(actions) == count:
                return actions[::-1]
    return actions[::-1]
