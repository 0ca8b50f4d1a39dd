"""Loops seen in the fold alone (`policy/loops.py`), and what the policy does about them
(`policy.loops_caught`): each detector on states built from records, at its threshold and one
short of it; the escalation nudge -> wind-down and restart -> stuck."""

from __future__ import annotations

import itertools
import json

import pytest
from pydantic import ValidationError

from ouroboros.ground.config import LoopSettings
from ouroboros.ground.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ouroboros.policy import loops, policy, room
from ouroboros.policy.policy import End, FreeRoom
from ouroboros.state.fold import RunState
from ouroboros.state.records import (
    EndReason,
    LoopDetected,
    LoopKind,
    MessageRecord,
    Notice,
    SessionEnd,
    SessionStart,
    WindDown,
)
from tests.test_policy import rules_at

IDS = itertools.count()
Step = tuple[str, str, int]
"""A command, its output and its exit code."""


def started(state: RunState | None = None, session: int = 1) -> RunState:
    state = state or RunState()
    opening = [SystemMessage(content="Work."), UserMessage(content="Begin.", origin="restart")]
    state.apply(SessionStart(session=session, reason="fresh", messages=opening))
    return state


def ran(state: RunState, *steps: Step) -> RunState:
    """Each step a reply calling `shell_exec`, and its result."""
    for command, output, code in steps:
        call = ToolCall(
            id=f"c{next(IDS)}", name="shell_exec", arguments=json.dumps({"command": command})
        )
        result = ToolMessage(tool_call_id=call.id, name=call.name, content=output, exit_code=code)
        for message in (AssistantMessage(content="", tool_calls=(call,)), result):
            state.apply(MessageRecord(session=state.session, message=message))
    return state


def said(state: RunState, *texts: str) -> RunState:
    """Replies without a call, each answered as the session answers them."""
    for text in texts:
        state.apply(MessageRecord(session=state.session, message=AssistantMessage(content=text)))
        reply = UserMessage(content="Continue.", origin="continue")
        state.apply(MessageRecord(session=state.session, message=reply))
    return state


def ok(command: str) -> Step:
    return command, f"did {command}", 0


def failing(command: str) -> Step:
    return command, "Traceback ...\nValueError: no", 1


def caught(state: RunState, settings: LoopSettings | None = None) -> LoopKind | None:
    loop = loops.detect(state, settings or LoopSettings())
    return None if loop is None else loop.kind


def test_the_same_call_three_times_is_a_repeat() -> None:
    assert caught(ran(started(), ok("a"), ok("a"))) is None
    assert caught(ran(started(), ok("a"), ok("a"), ok("a"))) == LoopKind.REPEAT
    assert caught(ran(started(), ok("a"), ok("b"), ok("a"))) is None


def test_a_command_polled_while_its_output_changes_is_no_loop() -> None:
    polls = [("tail -1 build.log", f"step {n}/9", 0) for n in (1, 2, 3)]
    assert caught(ran(started(), *polls)) is None
    cycle = [("make", "building", 0), ("tail -1 build.log", "", 0)]
    assert (
        caught(ran(started(), *[(c, f"{o} {n}", x) for n in range(3) for c, o, x in cycle])) is None
    )


def test_two_or_three_calls_in_turn_three_times_over_are_a_cycle() -> None:
    two = [ok("a"), ok("b")] * 3
    assert caught(ran(started(), *two[:-1])) is None
    assert caught(ran(started(), *two)) == LoopKind.CYCLE
    three = [ok("a"), ok("b"), ok("c")] * 3
    assert caught(ran(started(), *three[:-1])) is None
    assert caught(ran(started(), *three)) == LoopKind.CYCLE
    # Different each time, as real work is (the same test run after each edit): no cycle.
    edits = [step for n in range(3) for step in (ok(f"sed -i s/{n}/ f.py"), ok("pytest"))]
    assert caught(ran(started(), *edits)) is None


def test_the_same_call_failing_the_same_way_among_failures() -> None:
    among = [failing("a"), failing("b"), failing("a"), failing("c"), failing("a")]
    assert caught(ran(started(), *among[:-1])) is None
    assert caught(ran(started(), *among)) == LoopKind.FAILING
    # A success between (an edit) breaks the streak: an edit-and-test loop is work.
    fixed = [failing("a"), ok("edit"), failing("a"), ok("edit 2"), failing("a")]
    assert caught(ran(started(), *fixed)) is None
    # The same call failing differently each time is not the same failure.
    other = [failing("a"), failing("b"), failing("a"), failing("c"), ("a", "other", 1)]
    assert caught(ran(started(), *other)) is None


def test_replies_without_a_call_in_a_row() -> None:
    assert caught(said(started(), "hmm", "well")) is None
    assert caught(said(started(), "hmm", "well", "so")) == LoopKind.NO_CALLS
    assert caught(said(ran(said(started(), "hmm", "well"), ok("ls")), "so")) is None


def test_refused_prompts_in_sessions_that_end_so() -> None:
    state = started()
    for session in (1, 2):
        assert caught(state) is None
        state.apply(Notice(event="context_overflow", session=session, message="too long"))
        end = EndReason.CONTEXT_OVERFLOW
        state.apply(SessionEnd(session=session, reason=end))
        state = started(state, session=session + 1)
    state.apply(Notice(event="context_overflow", session=3, message="too long"))
    assert caught(state) == LoopKind.OVERFLOWS
    # A session that ended otherwise (its context full) leaves the refusals before it behind.
    state.apply(SessionEnd(session=3, reason=EndReason.CONTEXT_FULL))
    assert caught(started(state, session=4)) is None


def test_a_session_that_redoes_the_previous_one() -> None:
    work = [ok("ls"), ok("cat notes"), failing("make"), ok("vi x"), ok("make test")]

    def after_work() -> RunState:
        return started(ran(started(), *work), session=2)

    assert caught(ran(after_work(), *work[:4])) is None
    assert caught(ran(after_work(), *work)) == LoopKind.SESSION_REPEAT
    # The same commands with other results: the files changed, the work went on.
    redone = [(command, output + " now", code) for command, output, code in work]
    assert caught(ran(after_work(), *redone)) is None


def test_a_threshold_of_0_turns_its_detector_off() -> None:
    assert caught(ran(started(), ok("a"), ok("a"), ok("a")), LoopSettings(repeat_after=0)) is None


def escalate(state: RunState, max_loops: int = 3) -> list[policy.Decision]:
    rules = rules_at(state, hard_at=0.3, soft_at=0.9)
    rules = room.Rules(**{**rules.__dict__, "loops": LoopSettings(max_loops=max_loops)})
    decisions = policy.loops_caught(state, rules, room.step_figures(state, rules))
    for decision in decisions:
        if not isinstance(decision, End | FreeRoom):  # records: what the session journals
            state.apply(decision)
    return decisions


def test_a_loop_is_named_then_restarted_then_stops_the_run_as_stuck() -> None:
    state = ran(started(), ok("a"), ok("a"), ok("a"))
    [nudge] = escalate(state)
    assert isinstance(nudge, LoopDetected)
    assert nudge.level == 1
    assert nudge.message is not None
    assert "same tool call 3 times" in nudge.message.content
    assert "echo" not in nudge.evidence
    assert escalate(state) == []  # a loop it was told of is not caught twice
    ran(state, ok("a"), ok("a"))
    assert escalate(state) == []
    ran(state, ok("a"))
    caught_again, wind_down = escalate(state)
    assert isinstance(caught_again, LoopDetected)
    assert caught_again.level == 2
    assert isinstance(wind_down, WindDown)
    assert wind_down.message is not None
    assert "going in circles" in wind_down.message.content
    ran(state, ok("a"))
    assert escalate(state) == []  # one of the two wind-down replies
    ran(state, ok("a"))
    [end] = escalate(state)
    assert isinstance(end, End)
    assert end.reason == EndReason.LOOP
    assert "same tool call" in end.detail
    assert state.loops.restarts == 1
    assert state.loops.detections == 2

    after = ran(started(state, session=2), *[ok("b")] * 3)
    assert [d.level for d in escalate(after, max_loops=1) if isinstance(d, LoopDetected)] == [1]
    ran(after, *[ok("b")] * 3)
    stuck = escalate(after, max_loops=1)
    assert [type(d) for d in stuck] == [LoopDetected, End]
    assert isinstance(stuck[1], End)
    assert stuck[1].reason == EndReason.STUCK


def test_a_loop_is_at_least_twice() -> None:
    for key in ("repeat_after", "cycle_repeats", "failing_after", "no_calls_after"):
        with pytest.raises(ValidationError, match=f"loops.{key} is 0 .* or at least 2"):
            LoopSettings.model_validate({key: 1})
        assert LoopSettings.model_validate({key: 0}) != LoopSettings.model_validate({key: 2})
