"""What the fold keeps of the agent's loops: fold data, counted across restarts and resumes.
Detecting a loop is the policy's (`policy/loops.py`), reading this tally and the session's view.
Pure."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ouroboros.context.view import ContextView
from ouroboros.ground.messages import AssistantMessage, ToolMessage
from ouroboros.ground.prompts import DEAD_END_NOTE
from ouroboros.state.records import LoopDetected

READING = frozenset({"file_read", "list_dir", "search_context"})
"""Tools that only read: redoing them after a restart is finding one's bearings, not a loop."""


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
    """Sessions in a row that a refused prompt ended (one that cannot be made smaller ends its
    session), since the newest loop caught."""

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
    named: LoopDetected | None = None
    """The newest loop the agent was told of: a restart after it carries no step over."""
    refused: bool = False
    """The server refused one of this session's prompts as too long."""

    def caught(self, record: LoopDetected, history_length: int) -> None:
        self.nudged, self.since, self.named = True, history_length, record
        if record.level == 2:
            self.winding = record


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def own_text(result: ToolMessage) -> str:
    """The result without the note a repeated dead end is given (`deadends/`), which counts
    the times it failed: a call that gives the same output is the same call again."""
    text = result.content
    if text.startswith(DEAD_END_NOTE):
        return text.partition("\n")[2]
    return text


def calls_with_results(
    view: ContextView, start: int, most: int | None = None
) -> list[tuple[str, ToolMessage]]:
    """The calls from `start` on that have their result, in order: (the call, the result); only
    the newest `most` of them when given (read from the end: a step costs what it looks at,
    not the session's length)."""
    results: dict[str, ToolMessage] = {}
    found: list[tuple[str, ToolMessage]] = []
    history = view.history
    for index in range(len(history) - 1, start - 1, -1):
        message = history[index]
        if isinstance(message, ToolMessage):
            results[message.tool_call_id] = message
        elif isinstance(message, AssistantMessage):
            found.extend(
                (f"{c.name} {c.arguments}", results[c.id])
                for c in reversed(message.tool_calls)
                if c.id in results
            )
            if most is not None and len(found) >= most:
                break
    found.reverse()
    return found if most is None else found[-most:]


def session_calls(view: ContextView, start: int) -> list[tuple[str, str]]:
    """The calls from `start` on that change or run something, as digests of the call and of
    its result (reading is what an agent does to find its bearings after a restart)."""
    return [
        (digest(call), digest(own_text(result)))
        for call, result in calls_with_results(view, start)
        if result.name not in READING
    ]
