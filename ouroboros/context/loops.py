"""Loops: the agent going in circles, seen in the fold alone.

Pure: each detector reads the session's history (from its opening, or from the newest loop the
agent was told of: a loop it was told of is not caught twice) and what the previous session did
(`LoopTally.previous_calls`), and returns the `Loop` it sees, with its evidence, or None. The
policy's `loops_caught` (`policy.py`) escalates: a nudge, then a wind-down and restart, then a
stop as `stuck`. A threshold of 0 turns its detector off.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ouroboros.config import LoopSettings
from ouroboros.context.view import ContextView
from ouroboros.messages import AssistantMessage, ToolMessage
from ouroboros.run.records import LoopDetected, LoopKind

if TYPE_CHECKING:
    from ouroboros.run.state import RunState

SHOWN_CHARS = 80
"""Of a call or a reply, in the evidence: enough to recognise it."""


@dataclass
class LoopTally:
    """The run's loops: they count across restarts and resumes."""

    detections: int = 0
    restarts: int = 0
    """Sessions restarted because the agent looped on after a nudge."""
    latest: LoopDetected | None = None
    previous_calls: list[tuple[str, str]] = field(default_factory=list)
    """The calls of the session before this one, from its opening: (call, result) digests."""
    overflows: int = 0
    """Prompts the server refused since the newest loop caught, in this session and those
    before it that ended so (a refused prompt that cannot be made smaller ends a session)."""

    def caught(self, record: LoopDetected) -> None:
        self.detections, self.latest, self.overflows = self.detections + 1, record, 0
        self.restarts += record.level == 2


@dataclass
class SessionLoops:
    """This session's: reset by a session start."""

    nudged: bool = False
    since: int = 0
    """History index from which the detectors look: after the newest loop caught."""
    winding: LoopDetected | None = None
    """The loop the session winds down for, before its restart."""

    def caught(self, record: LoopDetected, history_length: int) -> None:
        self.nudged, self.since = True, history_length
        if record.level == 2:
            self.winding = record


@dataclass(frozen=True)
class Loop:
    kind: LoopKind
    evidence: list[str]
    """What repeated: the calls (and the error, or the reply), shortened."""


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def short(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def failed(result: ToolMessage) -> bool:
    return result.error or result.exit_code not in (0, None)


def calls_with_results(view: ContextView, start: int) -> list[tuple[str, ToolMessage]]:
    """Each call from `start` on that has its result, in order: (the call, the result)."""
    history = view.history[start:]
    results = {m.tool_call_id: m for m in history if isinstance(m, ToolMessage)}
    return [
        (f"{c.name} {c.arguments}", results[c.id])
        for m in history
        if isinstance(m, AssistantMessage)
        for c in m.tool_calls
        if c.id in results
    ]


def session_calls(view: ContextView, start: int) -> list[tuple[str, str]]:
    """The calls from `start` on as digests of the call and of its result."""
    return [
        (digest(call), digest(result.content)) for call, result in calls_with_results(view, start)
    ]


def _start(state: RunState) -> int:
    return max(state.view.opening, state.session_loops.since)


def repeated_call(state: RunState, after: int) -> Loop | None:
    """The newest replies with calls made the same calls `after` times in a row (a reply
    without calls neither counts nor breaks the run)."""
    newest: list[str] | None = None
    count = 0
    for message in reversed(state.view.history[_start(state) :]):
        if not isinstance(message, AssistantMessage) or not message.tool_calls:
            continue
        calls = [f"{c.name} {c.arguments}" for c in message.tool_calls]
        if newest is not None and calls != newest:
            break
        newest, count = calls, count + 1
    if count < after:
        return None
    return Loop(LoopKind.REPEAT, [*map(short, newest or []), f"{count} times"])


def cycle(state: RunState, repeats: int) -> Loop | None:
    """The newest calls are a cycle of two or three different calls, `repeats` times over."""
    calls = [call for call, _ in calls_with_results(state.view, _start(state))]
    for period in (2, 3):
        tail = calls[-period * repeats :]
        if len(tail) < period * repeats or len(set(tail[:period])) < period:
            continue
        if all(tail[i] == tail[i % period] for i in range(len(tail))):
            return Loop(LoopKind.CYCLE, [*map(short, tail[:period]), f"{repeats} times"])
    return None


def same_failure(state: RunState, after: int) -> Loop | None:
    """Among the newest calls, all failing, one failed the same way `after` times."""
    seen: dict[tuple[str, str], int] = {}
    for call, result in reversed(calls_with_results(state.view, _start(state))):
        if not failed(result):
            break
        key = (call, digest(result.content))
        seen[key] = seen.get(key, 0) + 1
        if seen[key] >= after:
            last_line = (result.content.strip().splitlines() or [""])[-1]
            return Loop(LoopKind.FAILING, [short(call), short(last_line), f"{after} times"])
    return None


def no_calls(state: RunState, after: int) -> Loop | None:
    """The newest `after` replies called no tool."""
    replies = [m for m in state.view.history[_start(state) :] if isinstance(m, AssistantMessage)]
    tail = replies[-after:]
    if len(tail) < after or any(m.tool_calls for m in tail):
        return None
    return Loop(LoopKind.NO_CALLS, [short(tail[-1].content), f"{after} replies"])


def overflows(state: RunState, after: int) -> Loop | None:
    """The server refused `after` prompts as too long, in this session and in the sessions just
    before it that ended so."""
    count = state.loops.overflows
    return Loop(LoopKind.OVERFLOWS, [f"{count} prompts"]) if count >= after else None


def repeated_session(state: RunState, after: int) -> Loop | None:
    """This session's newest `after` calls did what the previous session did, in the same
    order, with the same results."""
    calls = calls_with_results(state.view, _start(state))[-after:]
    newest = [(digest(call), digest(result.content)) for call, result in calls]
    previous = state.loops.previous_calls
    if len(newest) < after:
        return None
    for i in range(len(previous) - after + 1):
        if previous[i : i + after] == newest:
            return Loop(LoopKind.SESSION_REPEAT, [short(call) for call, _ in calls])
    return None


Detector = Callable[["RunState", int], "Loop | None"]


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


def level(state: RunState, settings: LoopSettings) -> int:
    """1: the session's first loop, a nudge; 2: a loop after it, a restart; 3: one after
    `max_loops` such restarts in the run, a stop."""
    if not state.session_loops.nudged:
        return 1
    return 2 if state.loops.restarts < settings.max_loops else 3
