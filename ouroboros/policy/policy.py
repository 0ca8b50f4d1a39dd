"""The context policy: what to do as the window fills, decided from the run's state alone.

Pure: every function here reads the fold (`RunState`) and the run's fixed rules (`Rules`) and
returns decisions as values (`Mask`, `Cut`, `WindDown` and `Notice` records not yet journalled,
`End`, `FreeRoom`); the session carries them out in one place (`Session.carry_out`). The step's
figures (`StepFigures`: the prompt it projects, the lines in force) are computed once per step.

Past the soft line (or the hard line, when the run placed it first) old results are masked, or
the older part compacted; past the hard line the agent is told to wind down; a prompt that would
not fit ends the session. Results are cut to the room left, and when the server refuses a prompt
the results the model has not seen are cut too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from ouroboros.context.carryover import fit_step
from ouroboros.context.mask import round_waits_below
from ouroboros.context.tokens import Budget
from ouroboros.context.truncate import shown
from ouroboros.ground import prompts
from ouroboros.ground.messages import Message, ToolMessage, UserMessage
from ouroboros.policy import loops, rounds
from ouroboros.policy.result_room import ceiling
from ouroboros.policy.room import Rules, StepFigures, projected
from ouroboros.state.fold import RunState
from ouroboros.state.records import (
    Cut,
    EndReason,
    LoopDetected,
    LoopKind,
    Mask,
    MaskReason,
    Notice,
    WindDown,
)


@dataclass(frozen=True)
class End:
    """The session is over."""

    reason: EndReason
    detail: str


Means = Literal["mask", "compact"]


@dataclass(frozen=True)
class FreeRoom:
    """Past `line`, room is freed down to `target` by the means of `order`, in turn: the first
    always, the next only while the prompt is still past the line and no compaction worked.
    (Which results a mask takes is decided when it is carried out: `mask_down_to`.)"""

    line: int
    target: int
    reason: MaskReason
    waits_below: int
    order: tuple[Means, ...]
    forced: bool = False
    """The compaction was asked for (`python -m ouroboros compact`)."""


Decision = Mask | Cut | WindDown | Notice | LoopDetected | End | FreeRoom


# --- masking -----------------------------------------------------------------------------------


def mask(state: RunState, rules: Rules, call_ids: list[str], reason: MaskReason) -> Mask | None:
    """These results masked, with what it does: the next prompt before and after, and what a
    server's prompt cache would process again (everything from the first of them on)."""
    if not call_ids:
        return None
    view, calibration = state.view, state.ledger.calibration
    return Mask(
        session=state.session,
        call_ids=call_ids,
        reason=reason,
        projected_before=projected(state, rules),
        projected_after=projected(state, rules, view.masked_tally(call_ids)),
        processed_again=round(calibration.tally_tokens(view.tally_from_first(call_ids))),
    )


def mask_down_to(
    state: RunState, rules: Rules, target: int, reason: MaskReason, waits_below: int = 0
) -> Mask | None:
    """The oldest results masked down to `target`, if the round is worth its break of the
    server's prompt cache (`rounds.made`; `waits_below` 0: at once)."""
    excess = projected(state, rules) - max(target, 0)
    chosen = state.view.choose_masks(rules.masking, state.ledger.calibration, excess)
    decision = mask(state, rules, chosen, reason)
    if decision is None or not rounds.made(state, rules, decision, waits_below):
        return None
    return decision


def after_overflow(state: RunState, rules: Rules) -> list[Mask | Cut]:
    """The server refused the prompt: mask everything but the protected results; if the
    prompt would still be too big, cut the results the model has not seen (it would never see
    them whole anyway), as the carry-over cuts a step. Empty if nothing can be made smaller."""
    view, calibration = state.view, state.ledger.calibration
    chosen = view.all_but_protected(rules.masking, calibration)
    decisions: list[Mask | Cut] = []
    masking = mask(state, rules, chosen, MaskReason.OVERFLOW)
    after = projected(state, rules)
    if masking is not None:
        decisions.append(masking)
        after = masking.projected_after or after
    cut, _ = cut_unseen(state, after - rules.budget.prompt_budget, "refused")
    return decisions + ([cut] if cut else [])


def cut_unseen(
    state: RunState, over: int, reason: Literal["refused", "wind_down"]
) -> tuple[Cut | None, int]:
    """The results the model has not seen cut to take `over` tokens fewer than they take as
    sent now, as the carry-over cuts a step (a cut keeps at least its marker; one in force is
    never loosened), and the tokens that frees."""
    view, price = state.view, state.ledger.calibration.message_tokens
    unseen = view.unseen()
    if over <= 0 or not unseen:
        return None, 0

    def tokens(message: Message) -> int:
        return price(shown(message) if isinstance(message, ToolMessage) else message)

    now = sum(price(view.result_shown(m.tool_call_id)) for m in unseen)
    fitted = fit_step(list(unseen), now - over, tokens)
    cuts = {
        m.tool_call_id: min(m.room_bytes, view.cuts.get(m.tool_call_id, m.room_bytes))
        for m in fitted
        if isinstance(m, ToolMessage) and m.room_bytes is not None
    }
    if not cuts:
        return None, 0
    after = sum(
        tokens(m.model_copy(update={"room_bytes": cuts[m.tool_call_id]}))
        if m.tool_call_id in cuts
        else price(view.result_shown(m.tool_call_id))
        for m in unseen
    )
    return Cut(session=state.session, cuts=cuts, reason=reason), now - after


def still_wanted(
    state: RunState, rules: Rules, freeing: FreeRoom, means: Means, first: bool
) -> Literal["try", "skip", "done"]:
    """What becomes of a `FreeRoom` decision's next means: the first is tried, a later one only
    while the prompt is still past the line (else the room is made: done); a compaction (unless
    asked for) is skipped, and the next means tried, until the history has grown past where the
    last one failed, as it stands after the masks before it."""
    if not first and projected(state, rules) < freeing.line:
        return "done"
    if means == "compact" and not freeing.forced:
        return "try" if state.view.raw_total >= state.compaction_retry_above else "skip"
    return "try"


# --- after every step: phases, each seeing what the one before did ----------------------------


def loops_caught(state: RunState, rules: Rules, step: StepFigures) -> list[Decision]:
    """A loop: the session's first is named to the agent; one after it winds the session down
    and restarts it (at once when a context wind-down is under way, or where loops are not
    named: `Rules.loop_nudge`); one after `max_loops` such restarts stops the run as `stuck`."""
    winding = state.session_loops.winding
    if winding is not None:
        if state.wind_down_replies is None:  # killed between the loop's record and its wind-down
            return [loop_wind_down(state, rules, step, winding.loop, winding.evidence)]
        used = state.wind_down_replies >= rules.wind_down_turns
        named = prompts.loop_named(winding.loop, winding.evidence)
        return [End(EndReason.LOOP, named)] if used else []
    loop = loops.detect(state, rules.loops)
    if loop is None:
        return []
    level = loops.level(state, rules.loops, rules.loop_nudge)
    named = prompts.loop_named(loop.kind, loop.evidence)
    caught = LoopDetected(
        session=state.session, loop=loop.kind, evidence=loop.evidence, level=level
    )
    if level == 1:
        nudge = UserMessage(content=prompts.loop_nudge(loop.kind, loop.evidence), origin="nudge")
        return [caught.model_copy(update={"message": nudge})]
    if level == 3:
        return [caught, End(EndReason.STUCK, named)]
    if rules.wind_down_turns == 0 or state.wind_down_replies is not None or not rules.loop_nudge:
        # Without a nudge, no wind-down either: a model that copies would save its loop.
        return [caught, End(EndReason.LOOP, named)]
    return [caught, loop_wind_down(state, rules, step, loop.kind, loop.evidence)]


def loop_wind_down(
    state: RunState, rules: Rules, step: StepFigures, kind: LoopKind, evidence: list[str]
) -> WindDown:
    turns, now = rules.wind_down_turns, projected(state, rules)
    notice = UserMessage(content=prompts.loop_wind_down(kind, evidence, turns), origin="wind_down")
    return WindDown(
        session=state.session,
        projected=now,
        hard_line=step.hard_line,
        room=rules.budget.prompt_budget - now,
        reply_allowance=step.lines.reply,
        turns_left=turns,
        message=notice,
    )


def spent(state: RunState, rules: Rules, step: StepFigures) -> list[Decision]:
    """A wind-down whose replies are used ends the session (before any room is freed: a
    session that ends needs none)."""
    replies = state.wind_down_replies
    if replies is not None and replies >= rules.wind_down_turns:
        return [End(EndReason.CONTEXT_FULL, "wind-down replies used")]
    return []


def free_room(state: RunState, rules: Rules, step: StepFigures) -> list[Decision]:
    """Past the soft line, or (before a wind-down) past the hard line when it comes first: how
    room is freed, as configured (mask, or compact); nothing while the prompt is below, nor in a
    wind-down unless asked for (the session ends soon: its replies' room is `room_for_replies`')."""
    c, budget = rules.context, rules.budget
    low_water = int(c.mask_low_water * budget.prompt_budget)
    if state.wind_down_replies is None and step.hard_line < budget.soft_line:
        line, target = step.hard_line, min(low_water, step.hard_line - 1)
        reason = MaskReason.WIND_DOWN_LINE
    else:
        line, target, reason = budget.soft_line, low_water, MaskReason.SOFT_THRESHOLD
    forced = step.compaction_requested
    if not forced and (projected(state, rules) < line or state.wind_down_replies is not None):
        return []
    compacts = state.view.raw_total >= state.compaction_retry_above
    if forced or (c.strategy == "compact" and compacts):
        # A compaction first; masking only if it failed, and then at once.
        return [FreeRoom(line, target, reason, 0, ("compact", "mask"), forced)]
    if c.strategy == "compact":
        return [FreeRoom(line, target, reason, 0, ("mask",))]
    waits_below = round_waits_below(line, step.hard_line)
    order: tuple[Means, ...] = (
        ("mask", "compact") if c.strategy == "mask_then_compact" and compacts else ("mask",)
    )
    return [FreeRoom(line, target, reason, waits_below, order)]


def room_for_replies(state: RunState, rules: Rules, step: StepFigures) -> list[Decision]:
    """In a wind-down, the promised replies need their room more than results the model has
    seen: when the prompt is past what they need (`result_room.ceiling`: the line moved under a
    step, or one step went far past it), those are masked, oldest first, the newest too if need
    be; never one it has not seen. Past the line but within what they need, nothing is: the
    line's room counts the step that crosses it."""
    short = projected(state, rules) - ceiling(state, rules, step)
    if state.wind_down_replies is None or short <= 0:
        return []
    relaxed = replace(rules.masking, protected_count=0)
    chosen = state.view.choose_masks(relaxed, state.ledger.calibration, short)
    decision = mask(state, rules, chosen, MaskReason.WIND_DOWN_ROOM)
    return [decision] if decision else []


def wind_down_or_end(state: RunState, rules: Rules, step: StepFigures) -> list[Decision]:
    """A prompt past the budget ends the session (saying so when it jumped over the wind-down);
    one past the hard line (or after a suspected truncation) starts the wind-down."""
    budget, turns = rules.budget, rules.wind_down_turns
    winding = state.wind_down_replies is not None
    now = projected(state, rules)
    # A wind-down placed just now was placed on the prompt before its message: deciding again
    # with the message in (a resume finishing the step) must not end what it promised.
    just_placed = winding and state.wind_down_replies == 0
    if now > budget.prompt_budget and not just_placed:
        return over_budget(state, step, budget, now, winding)
    if winding or not (now >= step.hard_line or state.ledger.truncation_suspected):
        return []
    room = budget.prompt_budget - now
    notice = UserMessage(
        content=prompts.wind_down(room, turns, rules.instructions), origin="wind_down"
    )
    wind_down = WindDown(
        session=state.session,
        projected=now,
        hard_line=step.hard_line,
        room=room,
        reply_allowance=step.lines.reply,
        turns_left=turns,
        message=notice if turns else None,
    )
    if turns == 0:
        return [wind_down, End(EndReason.CONTEXT_FULL, "hard threshold reached")]
    return [wind_down]


def over_budget(
    state: RunState, step: StepFigures, budget: Budget, now: int, winding: bool
) -> list[Decision]:
    """The next prompt, at `now` tokens, is past the budget."""
    # A promised reply comes before the length of results the model has not seen yet (each
    # saved whole where its cut marker says): the room was sized on estimates.
    over = now - budget.prompt_budget
    cut, freed = cut_unseen(state, over, "wind_down") if winding else (None, 0)
    if cut is not None and now - freed <= budget.prompt_budget:
        return [cut]
    detail = f"next prompt ~{now:,} tokens > budget {budget.prompt_budget:,}"
    end = End(EndReason.CONTEXT_FULL, detail)
    if winding:
        return [end]
    missed = Notice(
        event="wind_down_missed",
        session=state.session,
        message="one step went past the hard line and the prompt budget at once: no room was "
        "left to ask the agent to save its state",
        details={
            "projected": now,
            "hard_line": step.hard_line,
            "prompt_budget": budget.prompt_budget,
        },
    )
    return [missed, end]


Phase = Callable[[RunState, Rules, StepFigures], list[Decision]]


@dataclass(frozen=True)
class ContextPolicy:
    """What is done as the window fills: phases run after every step, in order, each on the
    state the decisions of the one before made; and the answer to a refused prompt (empty: the
    session ends). The harness's own is `MANAGED`; a bench compares others of the same shape."""

    after_step: tuple[Phase, ...]
    after_overflow: Callable[[RunState, Rules], list[Mask | Cut]]


MANAGED = ContextPolicy(
    (loops_caught, spent, free_room, room_for_replies, wind_down_or_end, room_for_replies),
    after_overflow,
)
