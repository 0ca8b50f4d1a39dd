"""Masking rounds and the server's prompt cache (`context.rounds`, `policy.mask_down_to`,
`policy.free_room`): fewer, larger rounds below the hard line; past it, only a round that keeps
the session going; none in a wind-down. Decided from states built from records."""

from __future__ import annotations

import json

from ouroboros.context.mask import MaskPolicy
from ouroboros.context.tokens import Budget
from ouroboros.ground.config import ContextSettings
from ouroboros.ground.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ouroboros.policy import policy, room, rounds
from ouroboros.policy.policy import FreeRoom
from ouroboros.policy.room import Rules
from ouroboros.state.fold import RunState
from ouroboros.state.records import MaskReason, MessageRecord, SessionStart, WindDown

MASKING = MaskPolicy(protected_count=1, protected_tokens=10**6, min_tokens=10)


def session_with_results(count: int, words: int = 300) -> RunState:
    """A session whose steps each read a result of so many words."""
    return session_with_sizes([words] * count)


def session_with_sizes(words: list[int]) -> RunState:
    """A session whose steps read results of these many words, oldest first."""
    state = RunState()
    opening = [SystemMessage(content="Work."), UserMessage(content="Begin.", origin="restart")]
    state.apply(SessionStart(session=1, reason="fresh", messages=opening))
    for n, size in enumerate(words):
        call = ToolCall(id=f"c{n}", name="shell_exec", arguments=json.dumps({"command": f"x{n}"}))
        output = " ".join(f"w{i}" for i in range(size))
        result = ToolMessage(tool_call_id=call.id, name=call.name, content=output, exit_code=0)
        for message in (AssistantMessage(content="", tool_calls=(call,)), result):
            state.apply(MessageRecord(session=1, message=message))
    return state


def rules_with(prompt_budget: int, max_output: int = 16) -> Rules:
    budget = Budget(prompt_budget * 2, prompt_budget, int(prompt_budget * 0.7), prompt_budget)
    return Rules(budget, MASKING, ContextSettings(mask_low_water=0.4), 2, max_output, 0)


def now(state: RunState) -> int:
    return room.projected(state, rules_with(10**6))


def test_below_the_hard_line_a_round_waits_until_it_frees_half_the_headroom() -> None:
    state = session_with_results(6)
    prompt = now(state)
    # Down to the first result: all but the newest masked, worth its break (it frees most of
    # what the server processes again), but a tenth of a budget ten times the prompt.
    far = rules_with(10 * prompt)
    assert policy.mask_down_to(state, far, 0, MaskReason.SOFT_THRESHOLD, 9 * prompt) is None
    # Where that is half the headroom (soft line to low water) or more, it is made.
    near = rules_with(prompt)
    freed_enough = policy.mask_down_to(state, near, 0, MaskReason.SOFT_THRESHOLD, 2 * prompt)
    assert freed_enough is not None
    before, after = freed_enough.projected_before, freed_enough.projected_after
    assert before is not None
    assert after is not None
    assert before - after >= rounds.HEADROOM_SHARE * rounds.headroom(near)


def test_past_the_hard_line_a_round_that_leaves_the_prompt_past_it_is_not_made() -> None:
    state = session_with_results(6)
    prompt, rules = now(state), rules_with(10 * now(state))
    # One result masked (target just below the prompt): the prompt stays past a line far below.
    assert policy.mask_down_to(state, rules, prompt - 10, MaskReason.WIND_DOWN_LINE, 10) is None
    # Past a line it does take it back below, and for room for more than a step, it is made.
    line = prompt - 10
    assert policy.mask_down_to(state, rules, prompt - 10, MaskReason.WIND_DOWN_LINE, line)


def test_past_the_hard_line_a_round_frees_a_step_or_is_worth_its_break() -> None:
    state = session_with_results(6)
    prompt = now(state)
    # One old result masked: little for what it makes the server process again. With replies
    # taken as 4,000 tokens (an eighth of the output reserve, none measured yet) it frees no room
    # for a step: not made.
    line = prompt - 10  # the round takes the prompt back below it
    long_replies = rules_with(10 * prompt, max_output=8 * 4000)
    assert rounds.one_step(state, long_replies) > prompt // 4
    decision = policy.mask_down_to(state, long_replies, line, MaskReason.WIND_DOWN_LINE, line)
    assert decision is None
    # With short replies the same round makes room for the next step.
    short_replies = rules_with(10 * prompt, max_output=16)
    assert policy.mask_down_to(state, short_replies, line, MaskReason.WIND_DOWN_LINE, line)


def test_a_round_asked_for_at_once_is_made() -> None:
    state = session_with_results(6)
    rules = rules_with(10 * now(state), max_output=4000)
    assert policy.mask_down_to(state, rules, now(state) - 10, MaskReason.SOFT_THRESHOLD, 0)


def test_a_session_winding_down_frees_no_room_past_the_soft_line_unless_asked() -> None:
    state = session_with_results(6)
    rules = rules_with(int(now(state) / 0.8))  # past the soft line, below the hard one
    figures = room.step_figures(state, rules)
    [freeing] = policy.free_room(state, rules, figures)
    assert isinstance(freeing, FreeRoom)
    notice = UserMessage(content="Save your state.", origin="wind_down")
    state.apply(
        WindDown(
            session=1,
            projected=now(state),
            hard_line=figures.hard_line,
            room=0,
            reply_allowance=16,
            turns_left=2,
            message=notice,
        )
    )
    assert policy.free_room(state, rules, room.step_figures(state, rules)) == []
    [asked] = policy.free_room(state, rules, room.step_figures(state, rules, True))
    assert isinstance(asked, FreeRoom)
    assert asked.forced


def test_rounds_wait_to_be_worth_their_break_up_to_the_hard_line() -> None:
    # Four small old results before a large protected one: masking them frees little for what
    # the server processes again (the large one after them), and less than half the headroom.
    state = session_with_sizes([100] * 4 + [3000])
    prompt = now(state)
    for share, past_the_hard_line in ((0.9, False), (0.99, True)):
        rules = rules_with(int(prompt / share))  # the prompt past the soft line, by so much
        figures = room.step_figures(state, rules)
        assert (prompt >= figures.hard_line) is past_the_hard_line
        [freeing] = policy.free_room(state, rules, figures)
        assert isinstance(freeing, FreeRoom)
        target, reason = freeing.target, freeing.reason
        assert policy.mask_down_to(state, rules, target, reason, 0), "there is a round to make"
        made = policy.mask_down_to(state, rules, target, reason, freeing.waits_below)
        # Below the hard line it waits to be worth its break; past it, it is made as it takes
        # the prompt back below and frees room for a step.
        assert (made is not None) is past_the_hard_line, share
