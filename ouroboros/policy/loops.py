"""Loops: the agent going in circles, seen in the fold alone.

Pure: each detector reads the session's history (from its opening, or from the newest loop the
agent was told of: a loop it was told of is not caught twice) and what the previous session did
(the fold's tally, `state/loop_tally.py`), and returns the `Loop` it sees, with its evidence,
or None. The policy's `loops_caught` (`policy.py`) escalates: a nudge, then a wind-down and
restart, then a stop as `stuck`. A threshold of 0 turns its detector off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ouroboros.ground.config import LoopSettings
from ouroboros.ground.messages import AssistantMessage, ToolMessage
from ouroboros.state.fold import RunState
from ouroboros.state.loop_tally import READING, calls_with_results, digest, own_text
from ouroboros.state.records import LoopKind

SHOWN_CHARS = 80
"""Of a call or a reply, in the evidence: enough to recognise it."""
READING_SPAN = 4
"""Of the newest calls, so many times the threshold are looked at for the ones that are not
reading."""
FAILURES_LOOKED_AT = 4
"""Of the newest failing calls, so many times the threshold are looked at for one that failed
the same way that often."""


@dataclass(frozen=True)
class Loop:
    kind: LoopKind
    evidence: list[str]
    """What repeated: the calls (and the error, or the reply), shortened."""


def short(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def failed(result: ToolMessage) -> bool:
    return result.error or result.exit_code not in (0, None)


def _start(state: RunState) -> int:
    return max(state.view.opening, state.session_loops.since)


def repeated_call(state: RunState, after: int) -> Loop | None:
    """The newest replies with calls made the same calls, with the same results, `after` times
    in a row (a reply without calls neither counts nor breaks the run; a command polled while
    its output changes is no loop)."""
    newest: list[tuple[str, str]] | None = None
    count = 0
    history = state.view.history
    results: dict[str, str] = {}
    for index in range(len(history) - 1, _start(state) - 1, -1):
        message = history[index]
        if isinstance(message, ToolMessage):
            results[message.tool_call_id] = digest(own_text(message))
        if not isinstance(message, AssistantMessage) or not message.tool_calls:
            continue
        calls = [(f"{c.name} {c.arguments}", results.get(c.id, "")) for c in message.tool_calls]
        if newest is not None and calls != newest:
            break
        newest, count = calls, count + 1
    if count < after:
        return None
    return Loop(LoopKind.REPEAT, [*(short(c) for c, _ in newest or []), f"{count} times"])


def cycle(state: RunState, repeats: int) -> Loop | None:
    """The newest calls are a cycle of two or three different calls, `repeats` times over."""
    newest = calls_with_results(state.view, _start(state), 3 * repeats)
    calls = [(call, digest(own_text(result))) for call, result in newest]
    for period in (2, 3):
        tail = calls[-period * repeats :]
        if len(tail) < period * repeats or len(set(tail[:period])) < period:
            continue
        if all(tail[i] == tail[i % period] for i in range(len(tail))):
            shown = [short(call) for call, _ in tail[:period]]
            return Loop(LoopKind.CYCLE, [*shown, f"{repeats} times"])
    return None


def same_failure(state: RunState, after: int) -> Loop | None:
    """Among the newest calls, all failing, one failed the same way `after` times."""
    seen: dict[tuple[str, str], int] = {}
    newest = calls_with_results(state.view, _start(state), FAILURES_LOOKED_AT * after)
    for call, result in reversed(newest):
        if not failed(result):
            break
        key = (call, digest(own_text(result)))
        seen[key] = seen.get(key, 0) + 1
        if seen[key] >= after:
            last_line = (result.content.strip().splitlines() or [""])[-1]
            return Loop(LoopKind.FAILING, [short(call), short(last_line), f"{after} times"])
    return None


def no_calls(state: RunState, after: int) -> Loop | None:
    """The newest `after` replies called no tool."""
    tail: list[AssistantMessage] = []
    history = state.view.history
    for index in range(len(history) - 1, _start(state) - 1, -1):
        message = history[index]
        if isinstance(message, AssistantMessage):
            if message.tool_calls:
                return None
            tail.append(message)
            if len(tail) == after:
                return Loop(LoopKind.NO_CALLS, [short(tail[0].content), f"{after} replies"])
    return None


def overflows(state: RunState, after: int) -> Loop | None:
    """The server refused `after` prompts as too long, in this session and in the sessions just
    before it that ended so."""
    # Sessions that a refusal ended, and this one if it had one: refusals the harness made room
    # for within one session are no loop.
    count = state.loops.overflows + state.session_loops.refused
    return Loop(LoopKind.OVERFLOWS, [f"{count} prompts"]) if count >= after else None


def repeated_session(state: RunState, after: int) -> Loop | None:
    """This session's newest `after` calls did what the previous session did, in the same
    order, with the same results."""
    calls = [
        (call, result)
        for call, result in calls_with_results(state.view, _start(state), READING_SPAN * after)
        if result.name not in READING
    ][-after:]
    newest = [(digest(call), digest(own_text(result))) for call, result in calls]
    previous = state.loops.previous_calls
    if len(newest) < after:
        return None
    for i in range(len(previous) - after + 1):
        if previous[i : i + after] == newest:
            return Loop(LoopKind.SESSION_REPEAT, [short(call) for call, _ in calls])
    return None


Detector = Callable[[RunState, int], "Loop | None"]


def detectors(settings: LoopSettings) -> list[tuple[Detector, int]]:
    """In the order they are asked: the first that sees a loop names it."""
    return [
        (repeated_call, settings.repeat_after),
        (cycle, settings.cycle_repeats),
        (same_failure, settings.failing_after),
        (no_calls, settings.no_calls_after),
        (overflows, settings.overflows_after),
        (repeated_session, settings.session_repeat_after),
    ]


def detect(state: RunState, settings: LoopSettings) -> Loop | None:
    for detector, threshold in detectors(settings):
        if threshold and (loop := detector(state, threshold)):
            return loop
    return None


def level(state: RunState, settings: LoopSettings, nudge: bool = True) -> int:
    """1: the session's first loop, a nudge (unless `nudge` is off); 2: a loop after it, a
    restart; 3: one after `max_loops` such restarts in the run, a stop."""
    if nudge and not state.session_loops.nudged:
        return 1
    return 2 if state.loops.restarts < settings.max_loops else 3
