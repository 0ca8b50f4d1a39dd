"""One session: call the model, record, run tools, record, manage the context; until it must end.

Control flow leaves the loop only as `SessionEnded` (the supervisor decides what follows) or as a
fatal `LLMError`; everything else that can go wrong inside a step becomes a message to the model.
What is sent and what is done as the window fills is the `Window`'s job.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from ouroboros import prompts
from ouroboros.harness import Harness, SessionEnded, reported
from ouroboros.llm import Completion, ContextOverflow, retrying
from ouroboros.messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from ouroboros.tokens import RawTally, raw_estimate
from ouroboros.tools import Fit
from ouroboros.window import Window


class Session:
    def __init__(self, harness: Harness):
        self.h = harness
        self.state = harness.journal.state
        self.window = Window(harness, self.append)
        self._last_calls = ""
        self._repeats = 0

    async def run(self) -> None:
        """The loop. Returns never: it ends by raising SessionEnded."""
        try:
            await self.finish_interrupted_step()
            while True:
                self.check_limits()
                completion = await self.call_model()
                await self.act_on(completion.message, cut=completion.finish_reason == "length")
        finally:
            self.window.masked_then_measured(None)  # a round no call measured is logged too

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
        room = partial(self.window.fitting_bytes, self.window.result_room(len(reply.tool_calls)))
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

    async def manage_context(self) -> None:
        await self.window.manage()

    def append(self, message: Message, usage: dict[str, Any] | None = None) -> None:
        """Journal first (fsync'ed), then the in-memory view: the journal is the truth.

        A reply carries its usage in the same record, so a crash never leaves one without the
        other (a counted turn whose reply is lost)."""
        extra = {"usage": usage} if usage is not None else {}
        self.h.journal.record(
            "message", session=self.state.session, message=message.model_dump(), **extra
        )
        self.window.view.append(message)

    async def call_model(self) -> Completion:
        """One completion; an overflow masks everything unprotected and retries exactly once."""
        for attempt in (1, 2):
            raw_prompt = self.window.raw_prompt()
            messages = self.window.view.messages()
            try:
                completion = await retrying(
                    partial(self.h.llm.complete, messages, self.window.schemas),
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
                if attempt == 2 or not await self.window.room_after_overflow():
                    raise SessionEnded("context_overflow", str(e)[:200]) from e
                continue
            self.record_reply(completion, raw_prompt)
            return completion
        raise AssertionError("unreachable")

    def record_reply(self, completion: Completion, raw_prompt: RawTally) -> None:
        estimate = self.h.ledger.calibration.tally_tokens(raw_prompt)
        turn = self.state.session_turns + 1
        raw_reply = raw_estimate(completion.message)
        m = self.h.ledger.measure(raw_prompt, raw_reply, reported(completion))
        self.append(completion.message, {"turn": turn, **m.__dict__})
        self.window.log_usage(m, turn, estimate, completion.finish_reason)
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
        self.window.masked_then_measured(m.prompt_tokens)

    async def run_tool(self, call: ToolCall, room: Fit | None = None) -> None:
        self.h.journal.record(
            "tool_started", session=self.state.session, call_id=call.id, name=call.name
        )
        outcome = await self.h.tools.run(call, room)
        self.append(outcome.message)
        shown = self.window.view.view[-1]
        kept = len(shown.content.encode())
        self.h.log.emit(
            "tool_call",
            session=self.state.session,
            turn=self.state.session_turns,
            call_id=call.id,
            name=call.name,
            result_tokens=self.h.ledger.calibration.message_tokens(shown),
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
