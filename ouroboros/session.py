"""One session: call the model, record, run tools, record, manage the context; until it must end.

Control flow leaves the loop only as `SessionEnded` (the supervisor decides what follows) or as a
fatal `LLMError`; everything else that can go wrong inside a step becomes a message to the model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from ouroboros import prompts
from ouroboros.config import Settings
from ouroboros.context.carryover import fit_step
from ouroboros.context.compact import snapshot_message, snapshot_request, split_point
from ouroboros.context.mask import MaskPolicy
from ouroboros.context.truncate import shown
from ouroboros.context.view import ContextView
from ouroboros.context.winddown import RECENT, WindDownLine, place
from ouroboros.events import EventLog
from ouroboros.llm import Completion, ContextOverflow, LLMClient, TransientError, retrying
from ouroboros.messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from ouroboros.state import Journal
from ouroboros.tokens import (
    SCHEMA_KIND,
    Ledger,
    Measurement,
    RawTally,
    output_kind,
    raw_estimate,
    tally,
    tools_estimate,
    units,
)
from ouroboros.tools import Fit, ToolRunner

BYTES_PER_RAW_TOKEN = 4
ROOM_SHARE = 0.8
"""Of the room left in the window, what this reply's tool results may fill."""
MIN_OUTPUT_BYTES = 1024
"""Even with no room left the agent sees the start and end of what it ran."""
COMPACT_REQUEST = "compact"
"""File in the state folder by which `python -m ouroboros compact` asks for a compaction."""
COMPACTION_REGROWTH = 1.25
"""After a failed compaction, how much the view must grow before the next try."""
SNAPSHOT_CHARS_PER_TOKEN = 3
"""The snapshot call's transcript is cut to fit the window (conservatively, per token)."""


def reported(completion: Completion) -> tuple[int, int, Literal["server", "timings"]] | None:
    """The server's own figures for this call, if it gave any."""
    usage = completion.usage
    return (usage.prompt_tokens, usage.completion_tokens, usage.source) if usage else None


class SessionEnded(Exception):
    """The session is over; `reason` tells the supervisor whether to restart or stop."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass
class Harness:
    """The components a session works with (built once per run by the supervisor)."""

    settings: Settings
    llm: LLMClient
    tools: ToolRunner
    journal: Journal
    log: EventLog
    ledger: Ledger
    mask_policy: MaskPolicy
    tools_rendered: bool = True
    """False when the server drops the tool schemas: they then cost no prompt tokens."""


class Session:
    def __init__(self, harness: Harness):
        self.h = harness
        self.state = state = harness.journal.state
        self.view = ContextView(state.messages, state.masked, state.cuts)
        self.schemas = harness.tools.schemas()
        self.schema_raw = tools_estimate(self.schemas) if harness.tools_rendered else 0
        self._pending_mask: dict[str, Any] | None = None
        self._last_calls = ""
        self._repeats = 0
        self._compaction_blocked_below = 0
        if state.compaction is not None:
            self.view.compact(*state.compaction)

    async def run(self) -> None:
        """The loop. Returns never: it ends by raising SessionEnded."""
        await self.finish_interrupted_step()
        while True:
            self.check_limits()
            completion = await self.call_model()
            await self.act_on(completion.message, cut=completion.finish_reason == "length")

    async def act_on(
        self, reply: AssistantMessage, resuming: bool = False, cut: bool = False
    ) -> None:
        """Run the reply's tool calls (or ask it to go on), then manage the context.

        After a crash the same step is finished from the journal: calls with a result are
        skipped, calls started without one get an 'interrupted' result and are never re-run.
        """
        results = (
            {m.tool_call_id: m for m in self.state.messages if isinstance(m, ToolMessage)}
            if resuming
            else {}
        )
        room = partial(self.fitting_bytes, self.result_room(len(reply.tool_calls)))
        for call in reply.tool_calls:
            if call.id in results:
                if call.name == "finish" and not results[call.id].content.startswith("error"):
                    raise SessionEnded("finish", results[call.id].content)  # died before run_end
            elif call.id in self.state.started_calls:
                interrupted = ToolMessage(
                    tool_call_id=call.id,
                    name=call.name,
                    content=prompts.CRASH_INTERRUPTED,
                    arguments=call.arguments,
                )
                self.append(interrupted)
            else:
                await self.run_tool(call, room)
        if not reply.tool_calls:
            # Never two assistant messages in a row: llama-server rejects it, and with a
            # thinking template a trailing assistant message is a refused "prefill".
            self.append(UserMessage(content=prompts.CONTINUE, origin="continue"))
        if cut and reply.tool_calls:
            # Its calls may be cut mid-argument (they got an error result): say why.
            limit = self.h.settings.llm.max_output_tokens
            self.append(UserMessage(content=prompts.cut_off(limit), origin="nudge"))
        self.nudge_if_repeating(reply.tool_calls)
        await self.manage_context()

    # --- recording -------------------------------------------------------------------------

    def append(self, message: Message, usage: dict[str, Any] | None = None) -> None:
        """Journal first (fsync'ed), then the in-memory view: the journal is the truth.

        A reply carries its usage in the same record, so a crash never leaves one without the
        other (a counted turn whose reply is lost)."""
        extra = {"usage": usage} if usage is not None else {}
        self.h.journal.record(
            "message", session=self.state.session, message=message.model_dump(), **extra
        )
        self.view.append(message)

    # --- the model call ---------------------------------------------------------------------

    async def call_model(self) -> Completion:
        """One completion; an overflow masks everything unprotected and retries exactly once."""
        for attempt in (1, 2):
            raw_prompt = self.raw_prompt()
            messages = self.view.messages()
            try:
                completion = await retrying(
                    partial(self.h.llm.complete, messages, self.schemas),
                    self.h.settings.llm,
                    self.h.log.retry,
                )
            except ContextOverflow as e:
                self.h.log.emit(
                    "context_overflow",
                    message=str(e)[:300],
                    session=self.state.session,
                    n_prompt_tokens=e.n_prompt_tokens,
                    n_ctx=e.n_ctx,
                    projected=self.h.ledger.project(raw_prompt),
                    attempt=attempt,
                )
                if e.n_prompt_tokens:
                    m = self.h.ledger.refused(e.n_prompt_tokens, raw_prompt)
                    self.h.journal.record("refused", session=self.state.session, **m.__dict__)
                    self.h.ledger.apply(m)
                if attempt == 2 or not await self.room_after_overflow():
                    raise SessionEnded("context_overflow", str(e)[:200]) from e
                continue
            self.record_reply(completion, raw_prompt)
            return completion
        raise AssertionError("unreachable")

    async def room_after_overflow(self) -> bool:
        """Mask everything outside the protected window; if the prompt is still too big, cut
        the results the model has not seen (it would never see them whole anyway), as the
        carry-over cuts a step. False if nothing changed."""
        policy, calibration = self.h.mask_policy, self.h.ledger.calibration
        masked_any = await self.mask(self.view.all_but_protected(policy, calibration), "overflow")
        over = self.projected() - self.h.ledger.budget.prompt_budget
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
            self.h.journal.record("cut", session=self.state.session, cuts=cuts)
            self.view.cut(cuts)
        return masked_any or bool(cuts)

    def record_reply(self, completion: Completion, raw_prompt: RawTally) -> None:
        estimate = self.h.ledger.calibration.tally_tokens(raw_prompt)
        turn = self.state.session_turns + 1
        raw_reply = raw_estimate(completion.message)
        m = self.h.ledger.measure(raw_prompt, raw_reply, reported(completion))
        self.append(completion.message, {"turn": turn, **m.__dict__})
        self.log_usage(m, turn, estimate, completion.finish_reason)
        budget = self.h.ledger.budget
        if m.silent_truncation:
            self.h.log.emit(
                "silent_truncation",
                message="the server counted far fewer prompt tokens than were sent: it probably "
                "cut the prompt (Ollama does so silently); treating the context as full",
                session=self.state.session,
                reported_prompt_tokens=m.prompt_tokens,
                estimated_prompt_tokens=estimate,
                context_limit=budget.limit,
            )
        if self._pending_mask is not None:
            self.h.log.emit(
                "context_mask", **self._pending_mask, measured_prompt_tokens=m.prompt_tokens
            )
            self._pending_mask = None

    # --- tools ------------------------------------------------------------------------------

    def result_room(self, calls: int) -> int:
        """Tokens each of this reply's results may take: the room left, after what masking could
        free, below the hard line (so the wind-down's room stays free), or below the cut once
        the wind-down began; shared by the reply's calls. A result cut for room is saved whole
        and shown whole again in a session that has room."""
        budget, calibration = self.h.ledger.budget, self.h.ledger.calibration
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

    async def run_tool(self, call: ToolCall, room: Fit | None = None) -> None:
        self.h.journal.record(
            "tool_started", session=self.state.session, call_id=call.id, name=call.name
        )
        outcome = await self.h.tools.run(call, room)
        self.append(outcome.message)
        kept = len(self.view.view[-1].content.encode())
        self.h.log.emit(
            "tool_call",
            session=self.state.session,
            turn=self.state.session_turns,
            call_id=call.id,
            name=call.name,
            result_tokens=self.h.ledger.calibration.message_tokens(self.view.view[-1]),
            arguments_bytes=len(call.arguments.encode()),
            duration_s=round(outcome.duration_s, 3),
            exit_code=outcome.message.exit_code,
            output_bytes=outcome.original_bytes,
            error=outcome.error,
        )
        if kept < outcome.original_bytes:
            self.h.log.emit(
                "truncation",
                session=self.state.session,
                name=call.name,
                original_bytes=outcome.original_bytes,
                kept_bytes=kept,
            )
        if outcome.blocked:
            self.h.log.emit(
                "blocked_command",
                session=self.state.session,
                rule=outcome.blocked,
                arguments=call.arguments[:500],
            )
        if outcome.finish_summary is not None:
            raise SessionEnded("finish", outcome.finish_summary)

    async def finish_interrupted_step(self) -> None:
        """After a crash: complete the step the journal shows was under way, if any."""
        last = max(
            (i for i, m in enumerate(self.state.messages) if isinstance(m, AssistantMessage)),
            default=None,
        )
        if last is None:
            return
        reply = self.state.messages[last]
        assert isinstance(reply, AssistantMessage)
        answered = any(isinstance(m, UserMessage) for m in self.state.messages[last + 1 :])
        if reply.tool_calls or not answered:
            await self.act_on(reply, resuming=True)

    def nudge_if_repeating(self, calls: tuple[ToolCall, ...]) -> None:
        if not calls:
            return
        signature = repr([(c.name, c.arguments) for c in calls])
        self._repeats = self._repeats + 1 if signature == self._last_calls else 1
        self._last_calls = signature
        if self._repeats >= self.h.settings.session.repeat_nudge_after:
            self.append(UserMessage(content=prompts.repeated(self._repeats), origin="nudge"))

    # --- context ----------------------------------------------------------------------------

    async def mask(self, call_ids: list[str], reason: str) -> bool:
        if not call_ids:
            return False
        # A placeholder says where the whole result can be read again: make it true first (a
        # file read is read again from the file).
        results = [self.view.result(call_id) for call_id in call_ids]
        await self.h.tools.save_whole([m for m in results if m.name != "file_read"])
        before = self.projected()
        self.h.journal.record("mask", session=self.state.session, call_ids=call_ids)
        self.view.mask(call_ids)
        after = self.projected()
        self._pending_mask = {
            "session": self.state.session,
            "masked": len(call_ids),
            "reason": reason,
            "total_masked": len(self.view.masked_ids),
            "projected_before": before,
            "projected_after": after,
            "estimated_reclaimed": before - after,
        }
        return True

    def raw_prompt(self, view: RawTally | None = None) -> RawTally:
        """Raw tokens of the next request (this view, else the current one), per kind."""
        return {**(self.view.raw_kinds if view is None else view), SCHEMA_KIND: self.schema_raw}

    def projected(self) -> int:
        return self.h.ledger.project(self.raw_prompt())

    async def manage_context(self) -> None:
        """Past the soft line, or (before a wind-down) past the point where the wind-down must
        start: free room as configured (mask, or compact). Then wind down, or end when full."""
        lines = self.lines()
        requested = self.take_compaction_request()
        line, target, reason = self.room_wanted(lines)
        if requested or self.projected() >= line:
            await self.free_room(line, target, reason, forced=requested)
        await self.wind_down_or_end(lines)

    def room_wanted(self, lines: WindDownLine) -> tuple[int, int, str]:
        """The line past which room is freed, and how far below it: the soft line down to its
        hysteresis; the wind-down start (when it comes first) down to just below it."""
        c, budget = self.h.settings.context, self.h.ledger.budget
        soft_target = budget.soft_line - int(c.mask_hysteresis * budget.prompt_budget)
        if self.state.wind_down_replies is None and lines.hard_line < budget.soft_line:
            return lines.hard_line, min(soft_target, lines.hard_line - 1), "wind_down_line"
        return budget.soft_line, soft_target, "soft_threshold"

    async def free_room(self, line: int, target: int, reason: str, forced: bool) -> None:
        strategy = self.h.settings.context.strategy
        if forced or strategy == "compact":
            if not await self.compact(forced=forced) and self.projected() >= line:
                await self.mask_down_to(target, reason)
            return
        await self.mask_down_to(target, reason)
        if strategy == "mask_then_compact" and self.projected() >= line:
            await self.compact(forced=False)

    async def mask_down_to(self, target: int, reason: str) -> None:
        excess = self.projected() - max(target, 0)
        chosen = self.view.choose_masks(self.h.mask_policy, self.h.ledger.calibration, excess)
        await self.mask(chosen, reason=reason)

    def lines(self) -> WindDownLine:
        """The hard line, from this run's own reply sizes."""
        s, calibration = self.h.settings, self.h.ledger.calibration
        replies = [m.completion_tokens for m in self.state.measurements[-RECENT:]]
        least = MIN_OUTPUT_BYTES // BYTES_PER_RAW_TOKEN * calibration.densest() + calibration.frame
        return place(
            self.h.ledger.budget,
            replies,
            self.state.wind_down_reply_tokens,
            round(least),
            calibration.message_tokens(UserMessage(content=prompts.wind_down(99_999, 9))),
            s.session.wind_down_turns,
            s.llm.max_output_tokens,
        )

    async def wind_down_or_end(self, lines: WindDownLine) -> None:
        ledger, budget = self.h.ledger, self.h.ledger.budget
        turns = self.h.settings.session.wind_down_turns
        replies = self.state.wind_down_replies
        if replies is not None and replies >= turns:
            raise SessionEnded("context_full", "wind-down replies used")
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
                "context_full",
                f"next prompt ~{projected:,} tokens > budget {budget.prompt_budget:,}",
            )
        if replies is not None:
            return
        if projected >= lines.hard_line or ledger.truncation_suspected:
            room = budget.prompt_budget - projected
            self.h.log.emit(
                "wind_down",
                session=self.state.session,
                projected=projected,
                hard_line=lines.hard_line,
                room=room,
                reply_allowance=lines.reply,
                turns_left=turns,
            )
            if turns == 0:
                raise SessionEnded("context_full", "hard threshold reached")
            text = prompts.wind_down(room, turns)
            self.append(UserMessage(content=text, origin="wind_down"))

    # --- compaction (context.strategy "compact" / "mask_then_compact", or on request) ----------

    def take_compaction_request(self) -> bool:
        flag = self.h.settings.paths.state_dir / COMPACT_REQUEST
        if not flag.exists():
            return False
        flag.unlink(missing_ok=True)
        return True

    async def compact(self, forced: bool) -> bool:
        """Replace the older part of the view by a snapshot the model writes, if that helps."""
        view = self.view
        if not forced and view.raw_total < self._compaction_blocked_below:
            return False
        first = max(view.start, 1)
        split = split_point(
            view.history, first, view.raw, self.h.settings.context.compact_keep_fraction
        )
        before = self.projected()
        if split is None:
            self.compaction_failed(before, None, "nothing old enough to compact")
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
            self.compaction_failed(before, None, f"the snapshot call failed: {e}")
            return False
        self.record_side_call(completion, raw_request, "compaction")
        snapshot = snapshot_message(completion.message.content)
        after = self.h.ledger.project(self.raw_prompt(view.compacted(split, snapshot)))
        if not completion.message.content.strip() or after >= before:
            self.compaction_failed(
                before, after, "the snapshot is not smaller than what it replaces"
            )
            return False
        self.h.journal.record(
            "compaction", session=self.state.session, start=split, snapshot=snapshot.model_dump()
        )
        view.compact(split, snapshot)
        self._compaction_blocked_below = 0
        self.h.log.emit(
            "compaction",
            session=self.state.session,
            forced=forced,
            messages_replaced=split - 1,
            projected_before=before,
            projected_after=after,
        )
        return True

    def compaction_failed(self, before: int, after: int | None, why: str) -> None:
        # Not again until the history has grown enough for a different outcome.
        self._compaction_blocked_below = int(self.view.raw_total * COMPACTION_REGROWTH)
        self.h.log.emit(
            "compaction_failed",
            session=self.state.session,
            message=why,
            projected_before=before,
            projected_after=after,
        )

    def record_side_call(self, completion: Completion, raw_prompt: RawTally, purpose: str) -> None:
        """A call outside the conversation: its tokens count, but it is no turn and no anchor."""
        ledger = self.h.ledger
        estimate = ledger.calibration.tally_tokens(raw_prompt)
        m = ledger.figures(raw_prompt, raw_estimate(completion.message), reported(completion))
        turn = self.state.session_turns
        self.h.journal.record(
            "usage", session=self.state.session, turn=turn, purpose=purpose, **m.__dict__
        )
        self.log_usage(m, turn, estimate, completion.finish_reason, purpose=purpose)

    def log_usage(
        self, m: Measurement, turn: int, estimate: int, finish_reason: str, **extra: str
    ) -> None:
        """One line of token_usage.jsonl (and of the terminal)."""
        budget = self.h.ledger.budget
        used = m.prompt_tokens + m.completion_tokens
        self.h.log.token_usage(
            session=self.state.session,
            turn=turn,
            **extra,
            prompt_tokens=m.prompt_tokens,
            completion_tokens=m.completion_tokens,
            total_tokens=used,
            source=m.source,
            estimated_prompt_tokens=estimate,
            context_limit=budget.limit,
            fraction=round(used / budget.limit, 4),
            zone=budget.zone(used, self.lines().hard_line),
            finish_reason=finish_reason,
        )

    def check_limits(self) -> None:
        s = self.h.settings
        st = self.state
        if s.supervisor.max_total_turns and st.total_turns >= s.supervisor.max_total_turns:
            raise SessionEnded("max_total_turns", f"{st.total_turns} turns in the run")
        if s.supervisor.max_total_tokens and st.total_tokens >= s.supervisor.max_total_tokens:
            raise SessionEnded("max_total_tokens", f"{st.total_tokens:,} tokens in the run")
        elapsed = time.time() - (st.started_at or time.time())
        if s.supervisor.max_wall_time_s and elapsed >= s.supervisor.max_wall_time_s:
            raise SessionEnded("max_wall_time", f"{elapsed:.0f} s since the run started")
        # After the run's limits: a run at its end must not restart for a session limit.
        if s.session.max_turns and st.session_turns >= s.session.max_turns:
            raise SessionEnded("max_turns", f"{st.session_turns} turns in this session")
