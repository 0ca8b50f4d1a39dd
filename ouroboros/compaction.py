"""Compaction (`context.strategy` "compact" or "mask_then_compact", or on request): the older
part of the session replaced by a state snapshot the model writes, when that makes it smaller.

The pure pieces (where to split, what to ask) are in `context.compact`; this makes the call,
checks the result, journals it and logs it.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from ouroboros.context.compact import snapshot_message, snapshot_request, split_point
from ouroboros.harness import Harness, reported
from ouroboros.llm import Completion, ContextOverflow, TransientError, retrying
from ouroboros.tokens import RawTally, raw_estimate, tally

if TYPE_CHECKING:
    from ouroboros.window import Window

COMPACT_REQUEST = "compact"
"""File in the state folder by which `python -m ouroboros compact` asks for a compaction."""
COMPACTION_REGROWTH = 1.25
"""After a failed compaction, how much the view must grow before the next try."""
SNAPSHOT_CHARS_PER_TOKEN = 3
"""The snapshot call's transcript is cut to fit the window (conservatively, per token)."""


class Compactor:
    def __init__(self, harness: Harness, window: Window):
        self.h = harness
        self.window = window
        self._blocked_below = 0

    def requested(self) -> bool:
        """Whether `python -m ouroboros compact` asked for one (the request is taken)."""
        flag = self.h.settings.paths.state_dir / COMPACT_REQUEST
        if not flag.exists():
            return False
        flag.unlink(missing_ok=True)
        return True

    async def compact(self, forced: bool) -> bool:
        """Replace the older part of the view by a snapshot the model writes, if that helps."""
        view, window = self.window.view, self.window
        if not forced and view.raw_total < self._blocked_below:
            return False
        first = max(view.start, 1)
        split = split_point(
            view.history, first, view.raw, self.h.settings.context.compact_keep_fraction
        )
        before = window.projected()
        if split is None:
            self.failed(before, None, "nothing old enough to compact")
            return False
        older = ([view.snapshot] if view.snapshot else []) + view.view[first:split]
        request = snapshot_request(
            older, self.h.ledger.budget.prompt_budget * SNAPSHOT_CHARS_PER_TOKEN
        )
        raw_request = tally(request)
        try:
            completion = await retrying(
                partial(self.h.llm.complete, request, []), self.h.settings.llm, self.h.log.retry
            )
        except (ContextOverflow, TransientError) as e:
            self.failed(before, None, f"the snapshot call failed: {e}")
            return False
        self.record_side_call(completion, raw_request, "compaction")
        snapshot = snapshot_message(completion.message.content)
        after = self.h.ledger.project(window.raw_prompt(view.compacted(split, snapshot)))
        if not completion.message.content.strip() or after >= before:
            self.failed(before, after, "the snapshot is not smaller than what it replaces")
            return False
        session = self.h.journal.state.session
        self.h.journal.record(
            "compaction", session=session, start=split, snapshot=snapshot.model_dump()
        )
        view.compact(split, snapshot)
        self._blocked_below = 0
        self.h.log.emit(
            "compaction",
            session=session,
            forced=forced,
            messages_replaced=split - 1,
            projected_before=before,
            projected_after=after,
        )
        return True

    def failed(self, before: int, after: int | None, why: str) -> None:
        # Not again until the history has grown enough for a different outcome.
        self._blocked_below = int(self.window.view.raw_total * COMPACTION_REGROWTH)
        self.h.log.emit(
            "compaction_failed",
            session=self.h.journal.state.session,
            message=why,
            projected_before=before,
            projected_after=after,
        )

    def record_side_call(self, completion: Completion, raw_prompt: RawTally, purpose: str) -> None:
        """A call outside the conversation: its tokens count, but it is no turn and no anchor."""
        ledger, state = self.h.ledger, self.h.journal.state
        estimate = ledger.calibration.tally_tokens(raw_prompt)
        m = ledger.figures(raw_prompt, raw_estimate(completion.message), reported(completion))
        turn = state.session_turns
        self.h.journal.record(
            "usage", session=state.session, turn=turn, purpose=purpose, **m.__dict__
        )
        self.window.log_usage(m, turn, estimate, completion.finish_reason, purpose=purpose)
