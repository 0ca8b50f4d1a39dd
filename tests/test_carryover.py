"""Carry-over as a pure function: the last step always, whole where there is room; then earlier
steps, their results masked before a step is dropped; harness messages never alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ouroboros.context.carryover import select_carryover, settled, steps
from ouroboros.context.mask import masked
from ouroboros.context.tokens import Calibration, raw_estimate
from ouroboros.context.truncate import cap_output, shown
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    tool_call_pairs_valid,
)
from tests.test_context_policies import histories


def tokens(message: Message) -> int:
    """Priced as the model is shown it, as the supervisor prices carry-over."""
    return raw_estimate(shown(message) if isinstance(message, ToolMessage) else message)


def msg_id(m: Message) -> str:
    if isinstance(m, ToolMessage):
        suffix = ":masked" if m.masked else ":cut" if m.room_bytes is not None else ""
        return f"tool:{m.tool_call_id}{suffix}"
    if isinstance(m, AssistantMessage):
        return "assistant:" + (",".join(c.id for c in m.tool_calls) or m.content[:12])
    return f"{m.kind}:{m.content[:12]}"


def call(i: int) -> ToolCall:
    return ToolCall(id=f"c{i}", name="file_read", arguments='{"path": "f.py"}')


def result(i: int, lines: int = 120) -> ToolMessage:
    return ToolMessage(
        tool_call_id=f"c{i}",
        name="file_read",
        content="line\n" * lines,
        arguments='{"path": "f.py"}',
    )


def read_step(i: int, lines: int, thought: str = "") -> list[Message]:
    return [AssistantMessage(content=thought, tool_calls=(call(i),)), result(i, lines)]


OPENING: list[Message] = [SystemMessage(content="sys"), UserMessage(content="go", origin="restart")]
TEXT_ONLY_LAST: list[Message] = [
    *OPENING,
    *read_step(1, 50),
    AssistantMessage(content="thinking it over"),
    UserMessage(content="continue please", origin="continue"),
]
FIVE_PARALLEL: list[Message] = [
    *OPENING,
    *read_step(0, 50),
    AssistantMessage(tool_calls=tuple(call(i) for i in range(1, 6))),
    *(result(i, 80) for i in range(1, 6)),
]
LONG_LAST_REPLY: list[Message] = [
    *OPENING,
    *read_step(1, 50),
    *read_step(2, 50, thought="a long plan " * 200),
]
SIX_STEPS: list[Message] = [*OPENING, *(m for i in range(6) for m in read_step(i, 200))]
WAITING = [*FIVE_PARALLEL, AssistantMessage(tool_calls=(call(6), call(7))), result(6)]


@pytest.mark.parametrize(
    ("history", "turns", "capacity", "share", "expected"),
    [
        pytest.param(
            TEXT_ONLY_LAST,
            2,
            10_000,
            10_000,
            ["assistant:c1", "tool:c1", "assistant:thinking it ", "user:continue ple"],
            id="text-only-last-reply-with-its-nudge",
        ),
        pytest.param(
            TEXT_ONLY_LAST,
            1,
            10_000,
            10_000,
            ["assistant:c1", "tool:c1", "assistant:thinking it ", "user:continue ple"],
            id="a-text-only-last-reply-with-the-step-it-reasons-about",
        ),
        pytest.param(
            FIVE_PARALLEL,
            1,
            10_000,
            0,
            ["assistant:c1,c2,c3,c4,c5", *(f"tool:c{i}" for i in range(1, 6))],
            id="five-parallel-results-all-whole",
        ),
        pytest.param(
            WAITING,
            1,
            10_000,
            0,
            ["assistant:c1,c2,c3,c4,c5", *(f"tool:c{i}" for i in range(1, 6))],
            id="an-unanswered-call-is-no-step",
        ),
        pytest.param(
            LONG_LAST_REPLY,
            5,
            10_000,
            300,
            ["assistant:c2", "tool:c2"],
            id="last-reply-longer-than-the-share-still-whole",
        ),
        pytest.param(
            SIX_STEPS,
            3,
            10_000,
            # Room for the last step, the one before it whole, and the next as a placeholder.
            3 * tokens(read_step(0, 200)[0])
            + 2 * tokens(result(0, 200))
            + tokens(masked(result(0, 200))),
            ["assistant:c3", "tool:c3:masked", "assistant:c4", "tool:c4"]
            + ["assistant:c5", "tool:c5"],
            id="earlier-steps-as-placeholders-before-dropping",
        ),
        pytest.param(
            SIX_STEPS,
            6,
            10_000,
            # The last step whole, two earlier ones as placeholders: not three.
            3 * tokens(read_step(0, 200)[0])
            + tokens(result(0, 200))
            + 2 * tokens(masked(result(0, 200))),
            ["assistant:c3", "tool:c3:masked", "assistant:c4", "tool:c4:masked"]
            + ["assistant:c5", "tool:c5"],
            id="then-the-oldest-steps-dropped",
        ),
        pytest.param(
            FIVE_PARALLEL,
            3,
            300,
            0,
            # Five cut markers alone would not fit: masked, biggest saving first, one still cut.
            [
                "assistant:c1,c2,c3,c4,c5",
                "tool:c1:cut",
                *(f"tool:c{i}:masked" for i in range(2, 6)),
            ],
            id="no-room-for-cuts-masked-never-dropped",
        ),
        pytest.param(FIVE_PARALLEL, 0, 10_000, 10_000, [], id="carry-nothing"),
    ],
)
def test_carryover_snapshots(
    history: list[Message], turns: int, capacity: int, share: int, expected: list[str]
) -> None:
    carried = select_carryover(history, turns, capacity, share, tokens)
    assert [msg_id(m) for m in carried] == expected
    assert tool_call_pairs_valid(carried)


def test_a_cut_last_step_shares_the_room_and_keeps_head_and_tail() -> None:
    history = [
        *OPENING,
        AssistantMessage(tool_calls=(call(1), call(2))),
        result(1, 20),
        ToolMessage(tool_call_id="c2", name="shell_exec", content="start\n" + "x\n" * 3000 + "END"),
    ]
    carried = select_carryover(history, 1, 900, 0, tokens)
    assert sum(tokens(m) for m in carried) <= 900
    small, big = (shown(m) for m in carried[1:] if isinstance(m, ToolMessage))
    assert small.content == result(1, 20).content, "the small result is not cut"
    assert big.content.startswith("start\n")
    assert big.content.endswith("END")
    assert "bytes) cut of" in big.content


def test_a_result_cut_for_room_is_carried_whole() -> None:
    text = "".join(f"line {n}\n" for n in range(400))
    stored = cap_output(text, 3000).text
    cut = ToolMessage(
        tool_call_id="c1",
        name="shell_exec",
        content=stored,
        output_bytes=len(text),
        output_lines=400,
        room_bytes=800,
    )
    assert len(shown(cut).content.encode()) <= 800
    history = [*OPENING, AssistantMessage(tool_calls=(call(1),)), cut]
    carried = select_carryover(history, 1, 10_000, 0, tokens)
    assert isinstance(carried[-1], ToolMessage)
    assert shown(carried[-1]).content == stored
    # Cutting the stored text again keeps what cutting the whole output would have kept.
    assert shown(cut).content == cap_output(text, 800).text


@given(histories(complete=False), st.integers(1, 6), st.integers(0, 5000), st.integers(0, 5000))
@settings(max_examples=300, deadline=None)
@pytest.mark.slow
def test_carryover_always_holds_the_last_step(
    history: list[Message], turns: int, capacity: int, share: int
) -> None:
    carried = select_carryover(history, turns, capacity, share, tokens)
    assert tool_call_pairs_valid(carried)
    assert not any(isinstance(m, SystemMessage) for m in carried)
    assert not any(isinstance(m, UserMessage) and m.origin == "restart" for m in carried)
    complete = steps(history)
    least = [masked(m) if isinstance(m, ToolMessage) else m for m in (complete or [[]])[-1]]
    if not complete or sum(tokens(m) for m in least) > capacity:
        assert carried == [], "nothing, or a last step that cannot fit even as placeholders"
        return
    first = carried[0]
    person = isinstance(first, UserMessage) and first.origin == "user"
    assert isinstance(first, AssistantMessage) or person, "a harness message never starts a step"
    last = complete[-1]
    reply = next(m for m in last if isinstance(m, AssistantMessage))
    assert reply in carried[-len(last) :], "the last reply is carried"
    for original, kept in zip(last, carried[-len(last) :], strict=True):
        if isinstance(original, ToolMessage):
            assert isinstance(kept, ToolMessage)
            if tokens(last[0]) + sum(tokens(m) for m in last[1:]) <= capacity:
                assert kept == original, "whole where there is room"
    # A text-only last reply comes with the step it reasons about: the last reply with calls.
    acting = [i for i, m in enumerate(carried) if isinstance(m, AssistantMessage) and m.tool_calls]
    start = len(carried) - len(last) if reply.tool_calls or not acting else acting[-1]
    while start and carried[start - 1] == UserMessage(content="go", origin="user"):
        start -= 1  # the task before the first reply starts its step
    used_by_last = sum(tokens(m) for m in carried[start:])
    assert sum(tokens(m) for m in carried) <= min(capacity, max(share, used_by_last))


def test_settled_drops_unfinished_calls() -> None:
    assert settled(WAITING) == FIVE_PARALLEL


PRICES = Calibration()


def priced(message: Message) -> int:
    """As the supervisor prices carry-over: calibrated, each kind of content at its own ratio."""
    return PRICES.message_tokens(shown(message) if isinstance(message, ToolMessage) else message)


OUTPUTS = st.sampled_from(["x = 1\n", "1234567890\n", "word ", "é"])


@st.composite
def small_histories(draw: st.DrawFn) -> list[Message]:
    """Steps of one to four calls whose results run from nothing to a few KB, prose or digits,
    and text-only replies between them: what a session at a small window ends with."""
    history: list[Message] = list(OPENING)
    for step in range(draw(st.integers(1, 5))):
        if draw(st.integers(0, 4)) == 0:
            history.append(AssistantMessage(content="thinking " * draw(st.integers(0, 20))))
            history.append(UserMessage(content="continue", origin="continue"))
            continue
        calls = [
            ToolCall(id=f"c{step}-{n}", name="shell_exec", arguments='{"command": "make test"}')
            for n in range(draw(st.integers(1, 4)))
        ]
        history.append(AssistantMessage(tool_calls=tuple(calls)))
        for c in calls:
            size = draw(st.one_of(st.integers(0, 400), st.integers(0, 4000)))
            text = draw(OUTPUTS)
            history.append(
                ToolMessage(
                    tool_call_id=c.id,
                    name=c.name,
                    content=(text * (size // len(text) + 1))[:size],
                    arguments=c.arguments,
                )
            )
    return history


@given(small_histories(), st.integers(1, 6), st.integers(40, 700), st.integers(0, 700))
@settings(max_examples=400, deadline=None)
def test_carryover_fits_its_room_at_every_budget(
    history: list[Message], turns: int, capacity: int, share: int
) -> None:
    """Down to rooms of a few dozen tokens, where a cut (which keeps at least its marker) cannot
    fit: what is carried never exceeds the room, and every call keeps exactly its results."""
    carried = select_carryover(history, turns, capacity, share, priced)
    assert sum(priced(m) for m in carried) <= capacity
    assert tool_call_pairs_valid(carried)
