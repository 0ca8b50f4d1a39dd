"""A session's context window: what is sent, how full it is, and what is done as it fills.

Past the soft line (or the hard line, when the run placed it first) old results are masked, or
the older part compacted; past the hard line the agent is told to wind down; a prompt that would
not fit ends the session. Results are cut to the room left, and when the server refuses a prompt
the results the model has not seen are cut too. Every decision is journalled before it is used.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from ouroboros import prompts
from ouroboros.cache_check import reuse_warning, shared_tokens
from ouroboros.call_figures import CallFigures, RawTally, Zone
from ouroboros.compaction import Compactor
from ouroboros.context.carryover import fit_step
from ouroboros.context.mask import round_waits_below, worth_a_round
from ouroboros.context.truncate import shown
from ouroboros.context.view import ContextView
from ouroboros.context.winddown import WindDownLine, place
from ouroboros.harness import Harness, SessionEnded, reported
from ouroboros.llm import Completion
from ouroboros.messages import Message, ToolMessage, UserMessage
from ouroboros.records import Cut, EndReason, Mask, MaskReason, WindDown
from ouroboros.tokens import SCHEMA_KIND, output_kind, raw_estimate, tools_estimate, units

BYTES_PER_RAW_TOKEN = 4
ROOM_SHARE = 0.8
"""Of the room left in the window, what this reply's tool results may fill."""
MIN_OUTPUT_BYTES = 1024
"""Even with no room left the agent sees the start and end of what it ran."""


class Window:
    def __init__(self, harness: Harness):
        self.h = harness
        self.state = harness.journal.state
        self.schemas = harness.tools.schemas()
        self.schema_raw = tools_estimate(self.schemas) if harness.tools_rendered else 0
        self.compactor = Compactor(harness, self)
        self.sent: tuple[list[Message], int] | None = None
        """The last request of the conversation and its prompt tokens; None after a call the
        server's cache saw in between (a compaction's)."""

    @property
    def view(self) -> ContextView:
        return self.state.view

    def raw_prompt(self, view: RawTally | None = None) -> RawTally:
        """Raw tokens of the next request (this view, else the current one), per kind."""
        return {**(self.view.raw_kinds if view is None else view), SCHEMA_KIND: self.schema_raw}

    def projected(self) -> int:
        return self.h.ledger.project(self.raw_prompt())

    def lines(self) -> WindDownLine:
        """The hard line, from this run's own reply sizes."""
        s, calibration = self.h.settings, self.h.ledger.calibration
        least = MIN_OUTPUT_BYTES // BYTES_PER_RAW_TOKEN * calibration.densest() + calibration.frame
        return place(
            self.h.budget,
            list(self.state.recent_replies),
            self.state.wind_down_reply_tokens,
            round(least),
            calibration.message_tokens(UserMessage(content=prompts.wind_down(99_999, 9))),
            s.session.wind_down_turns,
            s.llm.max_output_tokens,
        )

    # --- room for results ---------------------------------------------------------------------

    def result_room(self, calls: int) -> int:
        """Tokens each of this reply's results may take: the room left, after what masking could
        free, below the hard line (so the wind-down's room stays free), or below the cut once
        the wind-down began; shared by the reply's calls. A result cut for room is saved whole
        and shown whole again in a session that has room."""
        budget, calibration = self.h.budget, self.h.ledger.calibration
        winding = self.state.wind_down_replies is not None
        line = budget.prompt_budget if winding else self.lines().hard_line
        floor = self.projected() - self.view.reclaimable(self.h.mask_policy, calibration, calls)
        return int((line - floor) / max(calls, 1) * ROOM_SHARE)

    def fitting_bytes(self, room: int, text: str) -> int:
        """Bytes of `text` whose price fits `room` tokens, at the text's own density."""
        calibration = self.h.ledger.calibration
        price = calibration.tokens(units(text), output_kind(text)) + round(calibration.frame)
        size = len(text.encode())
        fitting = size if price <= room else int(size * max(room, 0) / max(price, 1))
        return max(MIN_OUTPUT_BYTES, fitting)

    # --- masking --------------------------------------------------------------------------------

    def round_figures(self, call_ids: list[str]) -> tuple[int, int, int]:
        """What masking these would do: the next prompt before and after, and what a server's
        prompt cache would process again (everything from the first of them on)."""
        calibration = self.h.ledger.calibration
        after = self.h.ledger.project(self.raw_prompt(self.view.masked_tally(call_ids)))
        again = calibration.tally_tokens(self.view.tally_from_first(call_ids))
        return self.projected(), after, round(again)

    async def mask(
        self,
        call_ids: list[str],
        reason: MaskReason,
        figures: tuple[int, int, int] | None = None,
    ) -> bool:
        if not call_ids:
            return False
        # A placeholder says where the whole result can be read again: make it true first (a
        # file read is read again from the file).
        results = [self.view.result(call_id) for call_id in call_ids]
        await self.h.tools.save_whole([m for m in results if m.name != "file_read"])
        before, after, processed_again = figures or self.round_figures(call_ids)
        self.h.journal.append(
            Mask(
                session=self.state.session,
                call_ids=call_ids,
                reason=reason,
                projected_before=before,
                projected_after=after,
                processed_again=processed_again,
            )
        )
        return True

    async def mask_down_to(self, target: int, reason: MaskReason, waits_below: int = 0) -> None:
        """Mask the oldest results down to `target`; below `waits_below`, only a round worth
        what it makes the server process again (`worth_a_round`)."""
        calibration = self.h.ledger.calibration
        excess = self.projected() - max(target, 0)
        chosen = self.view.choose_masks(self.h.mask_policy, calibration, excess)
        if not chosen:
            return
        before, after, again = figures = self.round_figures(chosen)
        if before >= waits_below or worth_a_round(before - after, again):
            await self.mask(chosen, reason, figures)

    async def room_after_overflow(self) -> bool:
        """Mask everything outside the protected window; if the prompt is still too big, cut
        the results the model has not seen (it would never see them whole anyway), as the
        carry-over cuts a step. False if nothing changed."""
        policy, calibration = self.h.mask_policy, self.h.ledger.calibration
        chosen = self.view.all_but_protected(policy, calibration)
        masked_any = await self.mask(chosen, MaskReason.OVERFLOW)
        over = self.projected() - self.h.budget.prompt_budget
        unseen = self.view.unseen()
        if over <= 0 or not unseen:
            return masked_any
        tokens = calibration.message_tokens
        await self.h.tools.save_whole(unseen)  # the cut marker says where the whole text is
        fitted = fit_step(list(unseen), sum(tokens(shown(m)) for m in unseen) - over, tokens)
        cuts = {
            m.tool_call_id: m.room_bytes
            for m in fitted
            if isinstance(m, ToolMessage) and m.room_bytes is not None
        }
        if cuts:
            self.h.journal.append(Cut(session=self.state.session, cuts=cuts))
        return masked_any or bool(cuts)

    # --- after every step ---------------------------------------------------------------------

    async def manage(self) -> None:
        """Past the soft line, or (before a wind-down) past the hard line when it comes first:
        free room as configured (mask, or compact). Then wind down, or end when full."""
        replies = self.state.wind_down_replies
        if replies is not None and replies >= self.h.settings.session.wind_down_turns:
            # Before freeing room: a session that ends needs none.
            raise SessionEnded(EndReason.CONTEXT_FULL, "wind-down replies used")
        lines = self.lines()
        requested = self.compactor.requested()
        line, target, reason = self.room_wanted(lines)
        if requested or self.projected() >= line:
            waits_below = round_waits_below(line, lines.hard_line)
            await self.free_room(line, target, reason, requested, waits_below)
        await self.wind_down_or_end(lines)

    def room_wanted(self, lines: WindDownLine) -> tuple[int, int, MaskReason]:
        """The line past which room is freed (the soft line, or the hard line when it comes
        first), and the low-water mark it is freed down to."""
        c, budget = self.h.settings.context, self.h.budget
        low_water = int(c.mask_low_water * budget.prompt_budget)
        if self.state.wind_down_replies is None and lines.hard_line < budget.soft_line:
            reason = MaskReason.WIND_DOWN_LINE
            return lines.hard_line, min(low_water, lines.hard_line - 1), reason
        return budget.soft_line, low_water, MaskReason.SOFT_THRESHOLD

    async def free_room(
        self, line: int, target: int, reason: MaskReason, forced: bool, waits_below: int
    ) -> None:
        strategy = self.h.settings.context.strategy
        if forced or strategy == "compact":
            if not await self.compactor.compact(forced=forced) and self.projected() >= line:
                await self.mask_down_to(target, reason)
            return
        await self.mask_down_to(target, reason, waits_below)
        if strategy == "mask_then_compact" and self.projected() >= line:
            await self.compactor.compact(forced=False)

    async def wind_down_or_end(self, lines: WindDownLine) -> None:
        ledger, budget = self.h.ledger, self.h.budget
        turns = self.h.settings.session.wind_down_turns
        replies = self.state.wind_down_replies
        if replies is not None:
            await self.room_for_replies(lines)
        projected = self.projected()
        if projected > budget.prompt_budget:
            if replies is None:
                self.h.log.emit(
                    "wind_down_missed",
                    message="one step went past the hard line and the cut at once: no room was "
                    "left to ask the agent to save its state",
                    session=self.state.session,
                    projected=projected,
                    hard_line=lines.hard_line,
                    prompt_budget=budget.prompt_budget,
                )
            raise SessionEnded(
                EndReason.CONTEXT_FULL,
                f"next prompt ~{projected:,} tokens > budget {budget.prompt_budget:,}",
            )
        if replies is None and (projected >= lines.hard_line or ledger.truncation_suspected):
            room = budget.prompt_budget - projected
            notice = UserMessage(content=prompts.wind_down(room, turns), origin="wind_down")
            self.h.journal.append(
                WindDown(
                    session=self.state.session,
                    projected=projected,
                    hard_line=lines.hard_line,
                    room=room,
                    reply_allowance=lines.reply,
                    turns_left=turns,
                    message=notice if turns else None,
                )
            )
            if turns == 0:
                raise SessionEnded(EndReason.CONTEXT_FULL, "hard threshold reached")
            await self.room_for_replies(lines)

    async def room_for_replies(self, lines: WindDownLine) -> None:
        """In a wind-down, the promised replies need their room more than results the model
        has seen: when the line moved under a step (the run's replies grew) or one step went
        far past it, those are masked, the newest too; never one it has not seen."""
        budget = self.h.budget
        short = (budget.prompt_budget - lines.hard_line) - (budget.prompt_budget - self.projected())
        if short > 0:
            relaxed = replace(self.h.mask_policy, protected_count=0)
            chosen = self.view.choose_masks(relaxed, self.h.ledger.calibration, short)
            await self.mask(chosen, MaskReason.WIND_DOWN_ROOM)

    def check_cache(self, messages: list[Message], figures: CallFigures) -> None:
        """Once a run: say so when the server processed again what it should have kept."""
        before, self.sent = self.sent, (messages, figures.prompt_tokens)
        if before is None or figures.cached_tokens is None or "cache" in self.h.warned:
            return
        price = self.h.ledger.calibration.message_tokens
        shared = shared_tokens(*before, messages, price)
        if (warning := reuse_warning(figures.cached_tokens, shared)) is not None:
            self.h.warned.add("cache")
            self.h.log.emit("warning", message=warning, session=self.state.session)

    def zone(self, used: int, truncated: bool) -> Zone:
        """Where a call's tokens fall against the lines in force. After a suspected truncation
        the window is taken as full; a wind-down is `hard` even when masking for the promised
        replies took the prompt back below the line."""
        budget = self.h.budget
        if truncated:
            return "over" if used > budget.prompt_budget else "hard"
        zone = budget.zone(used, self.lines().hard_line)
        winding = self.state.wind_down_replies is not None
        return "hard" if winding and zone in ("normal", "soft") else zone

    def figures(
        self, completion: Completion, raw_prompt: RawTally, turn: int, purpose: str | None = None
    ) -> CallFigures:
        """A call's figures for its record (and `token_usage.jsonl`)."""
        ledger = self.h.ledger
        m = ledger.figures(
            raw_prompt, raw_estimate(completion.message), reported(completion), self.h.counting
        )
        return CallFigures(
            **m.model_dump(),
            turn=turn,
            estimated_prompt_tokens=ledger.calibration.tally_tokens(raw_prompt),
            context_limit=self.h.budget.limit,
            zone=self.zone(m.prompt_tokens + m.completion_tokens, m.silent_truncation),
            finish_reason=completion.finish_reason,
            purpose=purpose,
            **asdict(completion.prefill),
        )
