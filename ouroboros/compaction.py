"""Compaction (`context.strategy` "compact" or "mask_then_compact", or on request): the older
part of the session replaced by a state snapshot the model writes, when that makes it smaller.

The pure pieces (where to split, what to ask) are in `context.compact`; this makes the call,
checks the result, journals it and logs it.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from ouroboros.context.compact import snapshot_message, snapshot_request, split_point
from ouroboros.harness import Harness
from ouroboros.llm import ContextOverflow, TransientError
from ouroboros.records import Compaction, SideCall
from ouroboros.retry import retrying
from ouroboros.state_folder import COMPACT_REQUEST
from ouroboros.tokens import tally

if TYPE_CHECKING:
    from ouroboros.window import Window

"""File in the state folder by which `python -m ouroboros compact` asks for a compaction."""
COMPACTION_REGROWTH = 1.25
"""After a failed compaction, how much the view must grow before the next try."""
SNAPSHOT_CHARS_PER_TOKEN = 3
"""The snapshot call's transcript is cut to fit the window (conservatively, per token)."""


class Compactor:
    def __init__(self, harness: Harness, window: Window):
        self.h = harness
        self.state = harness.journal.state
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
        request = snapshot_request(older, self.h.budget.prompt_budget * SNAPSHOT_CHARS_PER_TOKEN)
        raw_request = tally(request)
        try:
            completion = await retrying(
                partial(self.h.llm.complete, request, []),
                self.h.settings.llm,
                self.h.log.retry,
                self.h.clock,
            )
        except (ContextOverflow, TransientError) as e:
            self.failed(before, None, f"the snapshot call failed: {e}")
            return False
        figures = window.figures(completion, raw_request, self.state.session_turns, "compaction")
        self.h.journal.append(SideCall(session=self.state.session, usage=figures))
        self.window.sent = None  # the server's cache now holds the snapshot's prompt
        snapshot = snapshot_message(completion.message.content)
        after = self.h.ledger.project(window.raw_prompt(view.compacted(split, snapshot)))
        if not completion.message.content.strip() or after >= before:
            self.failed(before, after, "the snapshot is not smaller than what it replaces")
            return False
        self.h.journal.append(
            Compaction(
                session=self.state.session,
                start=split,
                snapshot=snapshot,
                forced=forced,
                projected_before=before,
                projected_after=after,
            )
        )
        self._blocked_below = 0
        return True

    def failed(self, before: int, after: int | None, why: str) -> None:
        # Not again until the history has grown enough for a different outcome.
        self._blocked_below = int(self.window.view.raw_total * COMPACTION_REGROWTH)
        self.h.log.emit(
            "compaction_failed",
            session=self.state.session,
            message=why,
            projected_before=before,
            projected_after=after,
        )
