"""The context policy decides from the fold alone and returns its decisions as values: each
phase is tested on a state built from records, with no session, model or file."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ouroboros.context.mask import MaskPolicy
from ouroboros.context.tokens import Budget, CallFigures
from ouroboros.ground.config import ContextSettings
from ouroboros.ground.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ouroboros.observe.describe import describe
from ouroboros.policy import policy, room
from ouroboros.policy.policy import End, FreeRoom
from ouroboros.policy.room import Rules
from ouroboros.sinks.record_events import events_of
from ouroboros.state.fold import RunState
from ouroboros.state.records import (
    CompactionFailed,
    Cut,
    EndReason,
    Mask,
    MaskReason,
    MessageRecord,
    Notice,
    Record,
    SessionStart,
    WindDown,
)

TURNS = 2
MAX_OUTPUT = 16


def session_with_results(sizes: list[int]) -> RunState:
    """A session whose steps each read a result of so many words."""
    state = RunState()
    opening = [SystemMessage(content="Work."), UserMessage(content="Begin.", origin="restart")]
    state.apply(SessionStart(session=1, reason="fresh", messages=opening))
    for n, size in enumerate(sizes):
        # Different commands: three of the same would be a loop (`policy/loops.py`).
        command = json.dumps({"command": f"x{n}"})
        call = ToolCall(id=f"c{n}", name="shell_exec", arguments=command)
        reply = AssistantMessage(content="", tool_calls=(call,))
        output = " ".join(f"w{i}" for i in range(size))
        result = ToolMessage(tool_call_id=call.id, name=call.name, content=output, exit_code=0)
        for message in (reply, result):
            state.apply(MessageRecord(session=1, message=message))
    return state


def rules_at(
    state: RunState, hard_at: float, soft_at: float = 0.5, strategy: str = "mask"
) -> Rules:
    """Lines placed so that the state's next prompt sits at these fractions of the budget."""
    bare = Rules(
        Budget(10**6, 10**6, 10**6, 10**6),
        MaskPolicy(1, 10**6, 10),
        ContextSettings(),
        TURNS,
        MAX_OUTPUT,
        0,
    )
    now = room.projected(state, bare)
    budget_tokens = int(now / hard_at)
    budget = Budget(
        budget_tokens * 2, budget_tokens, int(budget_tokens * soft_at), int(budget_tokens * 0.9)
    )
    context = ContextSettings(strategy=strategy)
    masking = MaskPolicy(1, budget_tokens, 10)
    return Rules(budget, masking, context, TURNS, MAX_OUTPUT, 0)


def step(state: RunState, rules: Rules, requested: bool = False) -> room.StepFigures:
    return room.step_figures(state, rules, requested)


def test_below_every_line_nothing_is_decided() -> None:
    state = session_with_results([200, 200, 200])
    rules = rules_at(state, hard_at=0.3, soft_at=0.9)
    figures = step(state, rules)
    for phase in policy.MANAGED.after_step:
        assert phase(state, rules, figures) == []


def test_past_the_soft_line_room_is_freed_by_the_configured_means_in_order() -> None:
    state = session_with_results([300, 300, 300])
    for strategy, order, waits in (
        ("mask", ("mask",), True),
        ("compact", ("compact", "mask"), False),
        ("mask_then_compact", ("mask", "compact"), True),
    ):
        rules = rules_at(state, hard_at=0.8, soft_at=0.5, strategy=strategy)
        [decision] = policy.free_room(state, rules, step(state, rules))
        assert isinstance(decision, FreeRoom)
        assert decision.order == order
        assert decision.reason == MaskReason.SOFT_THRESHOLD
        assert (decision.waits_below > 0) == waits, "only a compaction first masks at once"


def test_a_failed_compaction_is_not_tried_again_before_the_history_grows() -> None:
    state = session_with_results([300, 300, 300])
    rules = rules_at(state, hard_at=0.8, soft_at=0.5, strategy="compact")
    retry_above = state.view.raw_total + 1
    state.apply(CompactionFailed(session=1, message="no", retry_above=retry_above))
    [decision] = policy.free_room(state, rules, step(state, rules))
    assert isinstance(decision, FreeRoom)
    assert decision.order == ("mask",)
    # Asked for by the person: tried whatever the back-off says.
    [forced] = policy.free_room(state, rules, step(state, rules, requested=True))
    assert isinstance(forced, FreeRoom)
    assert forced.order == ("compact", "mask")
    assert forced.forced


def test_past_the_hard_line_the_agent_is_told_to_wind_down_once() -> None:
    state = session_with_results([300, 300, 300])
    rules = rules_at(state, hard_at=0.95)
    figures = step(state, rules)
    assert figures.hard_line < room.projected(state, rules) <= rules.budget.prompt_budget
    [wind_down] = policy.wind_down_or_end(state, rules, figures)
    assert isinstance(wind_down, WindDown)
    assert wind_down.hard_line == figures.hard_line
    assert wind_down.turns_left == TURNS
    assert wind_down.message is not None
    assert wind_down.message.origin == "wind_down"
    state.apply(wind_down)
    assert policy.wind_down_or_end(state, rules, step(state, rules)) == [], "told once"
    # Its replies used: the session ends before anything else is done.
    state.wind_down_replies = TURNS
    assert policy.spent(state, rules, step(state, rules)) == [
        End(EndReason.CONTEXT_FULL, "wind-down replies used")
    ]


def test_without_wind_down_turns_the_session_ends_at_the_hard_line() -> None:
    state = session_with_results([300, 300, 300])
    rules = replace(rules_at(state, hard_at=0.95), wind_down_turns=0)
    decisions = policy.wind_down_or_end(state, rules, step(state, rules))
    assert [type(d) for d in decisions] == [WindDown, End]
    wind_down = decisions[0]
    assert isinstance(wind_down, WindDown)
    assert wind_down.message is None


def test_a_step_past_the_budget_ends_the_session_and_says_the_wind_down_was_missed() -> None:
    state = session_with_results([300, 300, 300])
    rules = rules_at(state, hard_at=1.2)
    missed, end = policy.wind_down_or_end(state, rules, step(state, rules))
    assert isinstance(missed, Notice)
    assert missed.event == "wind_down_missed"
    assert isinstance(end, End)
    assert end.reason == EndReason.CONTEXT_FULL


def test_a_wind_down_past_the_budget_cuts_the_unseen_result_before_it_ends_the_session() -> None:
    """The room was sized on estimates: where the newest result (the model has not seen it)
    takes the prompt a little past the budget, it is cut and the promised reply still comes;
    where no cut can make the prompt fit, the session ends."""

    def winding() -> RunState:
        state = session_with_results([300, 300])
        notice = UserMessage(content="Save your state.", origin="wind_down")
        state.apply(
            WindDown(
                session=1,
                projected=0,
                hard_line=0,
                room=0,
                reply_allowance=0,
                turns_left=TURNS,
                message=notice,
            )
        )
        call = ToolCall(id="new", name="shell_exec", arguments='{"command": "make test"}')
        output = "\n".join(f"line {i} of the test log" for i in range(600))
        for message in (
            AssistantMessage(content="", tool_calls=(call,)),
            ToolMessage(tool_call_id="new", name=call.name, content=output, exit_code=1),
        ):
            state.apply(MessageRecord(session=1, message=message))
        return state

    state = winding()
    now = room.projected(state, rules_at(state, hard_at=1.0))
    result = state.ledger.calibration.message_tokens(state.messages[-1])
    # Past the budget by more than the result less its cut marker: a cut cannot fit it.
    for over, fits in ((50, True), (result // 2, True), (result - 5, False), (now, False)):
        state = winding()
        rules = replace(rules_at(state, hard_at=1.0), budget=Budget(now * 2, now - over, 1, 1))
        decisions = policy.wind_down_or_end(state, rules, step(state, rules))
        if not fits:
            assert [type(d) for d in decisions] == [End]
            continue
        [cut] = decisions
        assert isinstance(cut, Cut)
        assert list(cut.cuts) == ["new"], "only the result the model has not seen"
        assert cut.reason == "wind_down"
        state.apply(cut)
        cut_to = room.projected(state, rules)
        assert cut_to <= rules.budget.prompt_budget
        assert cut_to >= rules.budget.prompt_budget - result // 8, "cut by what it must, not half"
        # Cut again (the server refused it after all): from the cut in force, never looser.
        again, freed = policy.cut_unseen(state, 50, "refused")
        assert again is not None
        assert again.cuts["new"] < cut.cuts["new"]
        state.apply(again)
        assert room.projected(state, rules) <= cut_to - 50
        [event] = events_of(cut, state)
        line = describe(event)
        assert line is not None
        assert "result(s) the model has not seen to" in line.plain
        assert line.plain.endswith("bytes for the wind-down's next reply")


def test_a_refused_prompt_masks_all_but_the_protected_and_cuts_what_was_not_seen() -> None:
    state = session_with_results([300, 300, 300])
    # The newest step unanswered: its result has not been seen. Masking the rest is not enough.
    rules = rules_at(state, hard_at=5.0)
    decisions = policy.after_overflow(state, rules)
    mask = decisions[0]
    assert isinstance(mask, Mask)
    assert mask.reason == MaskReason.OVERFLOW
    assert mask.call_ids == ["c0", "c1"], "the unseen newest result is never masked"
    assert [type(d).__name__ for d in decisions] == ["Mask", "Cut"]


def test_deciding_changes_nothing() -> None:
    state = session_with_results([300, 300, 300, 300])
    rules = rules_at(state, hard_at=0.95, soft_at=0.3)
    before = (state.view.messages(), set(state.view.masked_ids), state.wind_down_replies)
    figures = step(state, rules)

    def decide() -> list[list[object]]:
        # A record's time is when it was made: the two decisions may be a millisecond apart.
        return [
            [d.model_copy(update={"ts": ""}) if isinstance(d, Record) else d for d in decided]
            for decided in (phase(state, rules, figures) for phase in policy.MANAGED.after_step)
        ]

    first, again = decide(), decide()
    assert first == again
    assert any(first)
    assert (state.view.messages(), set(state.view.masked_ids), state.wind_down_replies) == before


def test_a_compaction_after_masks_waits_for_the_history_to_regrow_past_the_failed_one() -> None:
    state = session_with_results([300, 300, 300])
    rules = rules_at(state, hard_at=0.8, soft_at=0.3, strategy="mask_then_compact")
    [freeing] = policy.free_room(state, rules, step(state, rules))
    assert isinstance(freeing, FreeRoom)
    assert freeing.order == ("mask", "compact")
    # Masks took the history below where the last compaction failed: no compaction again yet.
    state.apply(CompactionFailed(session=1, message="no", retry_above=state.view.raw_total))
    state.apply(Mask(session=1, call_ids=["c0"]))
    assert room.projected(state, rules) >= freeing.line
    assert policy.still_wanted(state, rules, freeing, "compact", first=False) == "skip"
    forced = replace(freeing, forced=True)
    assert policy.still_wanted(state, rules, forced, "compact", first=False) == "try"


def reply_figures(
    prompt: int, completion: int, raw_reply: int, finish: str, turn: int = 1, **more: Any
) -> CallFigures:
    """A model call's figures as the server counted them."""
    return CallFigures(
        prompt_tokens=prompt,
        completion_tokens=completion,
        source="server",
        raw_prompt=prompt - 100,
        raw_reply=raw_reply,
        silent_truncation=False,
        turn=turn,
        finish_reason=finish,
        **more,
    )


def test_the_wind_down_room_counts_a_reply_cut_off_before_any_call_as_it_is_shown() -> None:
    """A reply the server cut off at the output limit with no call is a short placeholder in
    every later prompt (`context.mask.cut_off_reply`): it does not make the room larger."""

    def after_replies(
        finish: str, text: str = "thinking at length " * 200
    ) -> tuple[RunState, room.StepFigures]:
        state = session_with_results([50])
        for turn in range(1, 9):
            figures = reply_figures(1000 + turn, 900, 3600, finish, turn)
            reply = AssistantMessage(content=text)
            state.apply(MessageRecord(session=1, message=reply, usage=figures))
            state.apply(MessageRecord(session=1, message=UserMessage(content="Go on.")))
        budget = Budget(20_000, 16_000, 8_000, 15_000)
        rules = Rules(budget, MaskPolicy(1, 16_000, 10), ContextSettings(), TURNS, 1000, 0)
        return state, step(state, rules)

    (generated, cut_off), (_, whole) = after_replies("length"), after_replies("stop")
    assert generated.total_completion_tokens == 8 * 900, "the tokens the server generated"
    assert whole.lines.reply == 900
    assert cut_off.lines.reply < 100
    assert cut_off.hard_line > whole.hard_line
    # A thinking model cut off while reasoning: no text (its reasoning is not sent back).
    _, reasoning = after_replies("length", text="")
    assert reasoning.lines.reply < 100


def test_the_prompt_after_a_reply_cut_off_before_any_call_is_projected_with_its_placeholder() -> (
    None
):
    """The next prompt holds the placeholder, not the reply the server counted: the projection
    is anchored on that, whatever the price of the whole reply would have been."""
    state = session_with_results([50])
    # A price of the whole reply (100 raw units) far from its count: it must not matter.
    figures = reply_figures(1000, 1024, 100, "length", raw_kinds=dict(state.view.raw_kinds))
    reply = AssistantMessage(content="thinking at length " * 200)
    state.apply(MessageRecord(session=1, message=reply, usage=figures))
    rules = rules_at(state, hard_at=0.5)
    placeholder = state.ledger.calibration.message_tokens(state.view.messages()[-1])
    assert abs(room.projected(state, rules) - (1000 + placeholder)) <= 20
    # A resumed step is answered from the reply as written, while it is the newest one.
    assert state.cut_off_text == reply.content
    state.apply(MessageRecord(session=1, message=UserMessage(content="Go on.")))
    state.apply(MessageRecord(session=1, message=AssistantMessage(content="Next.")))
    assert state.cut_off_text is None
