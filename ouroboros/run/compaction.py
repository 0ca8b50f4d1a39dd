"""Compaction (`context.strategy` "compact" or "mask_then_compact", or on request): the older
part of the session replaced by a recap the model writes, when that makes it smaller.

The pure pieces (where to split, what to ask) are in `context.compact`; this makes the side call,
checks the result and journals it (`Compaction`, or `CompactionFailed` with the size the history
must reach before the next try: the back-off is part of the fold).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ouroboros.context.compact import recap_message, recap_request, split_point
from ouroboros.context.ledger import Counting
from ouroboros.context.plan import in_opening
from ouroboros.context.tokens import tally
from ouroboros.ground.clock import Clock
from ouroboros.ground.config import Settings
from ouroboros.ground.state_folder import COMPACT_REQUEST
from ouroboros.model.llm import ContextOverflow, Model, TransientError
from ouroboros.model.retry import journalled, retrying
from ouroboros.policy import room
from ouroboros.policy.room import Rules
from ouroboros.run.call_notices import call_figures
from ouroboros.state.journal import Journal
from ouroboros.state.records import Compaction, CompactionFailed, SideCall

COMPACTION_REGROWTH = 1.25
"""After a failed compaction, how much the view must grow before the next try."""
RECAP_CHARS_PER_TOKEN = 3
"""The recap call's transcript is cut to fit the prompt budget (conservatively, per token)."""


def compaction_requested(state_dir: Path) -> bool:
    """Whether `python -m ouroboros compact` asked for one."""
    return (state_dir / COMPACT_REQUEST).exists()


def drop_compaction_request(state_dir: Path) -> None:
    """The request is taken: the compaction it asked for is being made."""
    (state_dir / COMPACT_REQUEST).unlink(missing_ok=True)


async def compact(
    model: Model,
    settings: Settings,
    journal: Journal,
    rules: Rules,
    counting: Counting,
    clock: Clock,
    forced: bool,
) -> bool:
    """Replace the older part of the view by a recap the model writes, if that helps."""
    state = journal.state
    view = state.view

    def failed(before: int, after: int | None, why: str) -> bool:
        # Not again until the history has grown enough for a different outcome.
        retry_above = int(view.raw_total * COMPACTION_REGROWTH)
        journal.append(
            CompactionFailed(
                session=state.session,
                message=why,
                projected_before=before,
                projected_after=after,
                retry_above=retry_above,
            )
        )
        return False

    first = max(view.start, 1)
    split = split_point(view.history, first, view.raw, settings.context.compact_keep_fraction)
    before = room.projected(state, rules)
    if split is None:
        return failed(before, None, "nothing old enough to compact")
    older = ([view.recap] if view.recap else []) + view.shown[first:split]
    request = recap_request(older, rules.budget.prompt_budget * RECAP_CHARS_PER_TOKEN)
    try:
        call = partial(model.complete, request, [])
        completion = await retrying(call, settings.llm, journalled(journal), clock)
    except (ContextOverflow, TransientError) as e:
        return failed(before, None, f"the recap call failed: {e}")
    figures = call_figures(
        state, rules, counting, completion, tally(request), state.session_turns, "compaction"
    )
    journal.append(SideCall(session=state.session, usage=figures))
    # The recap replaces the opening too: the plan it showed stays whole after it.
    recap = recap_message(completion.message.content + in_opening(state.plan.items))
    after = room.projected(state, rules, view.compacted(split, recap))
    if not completion.message.content.strip() or after >= before:
        return failed(before, after, "the recap is not smaller than what it replaces")
    journal.append(
        Compaction(
            session=state.session,
            start=split,
            recap=recap,
            forced=forced,
            projected_before=before,
            projected_after=after,
        )
    )
    return True
