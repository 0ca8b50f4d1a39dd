"""One session: call the model, record, run tools, record, manage the context; until it must end.

Control flow leaves the loop only as `SessionEnded` (the supervisor decides what follows) or as a
fatal `LLMError`; everything else that can go wrong inside a step becomes a message to the model.
What is sent and what is done as the window fills is the `Window`'s job.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

from ouroboros import prompts, reply_limits
from ouroboros.call_figures import CallFigures, RawTally
from ouroboros.harness import Harness, SessionEnded
from ouroboros.ledger import Ledger
from ouroboros.llm import Completion, ContextOverflow
from ouroboros.messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from ouroboros.records import EndReason, MessageRecord, Refused, ToolRun, ToolStarted
from ouroboros.reply_limits import Admitted
from ouroboros.retry import retrying
from ouroboros.tools import Fit
from ouroboros.usage_check import above_window, refused_count, shown
from ouroboros.usage_check import warning as usage_warning
from ouroboros.window import Window


class Session:
    def __init__(self, harness: Harness):
        self.h = harness
        self.state = harness.journal.state
        self.window = Window(harness)
        self._last_calls = ""
        self._repeats = 0

    async def run(self) -> None:
        """The loop. Returns never: it ends by raising SessionEnded."""
        await self.finish_interrupted_step()
        while True:
            self.check_limits()
            reply, dropped = await self.call_model()
            await self.act_on(reply.message, cut=reply.finish_reason == "length", dropped=dropped)

    async def act_on(
        self, reply: AssistantMessage, resuming: bool = False, cut: bool = False, dropped: int = 0
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
                if call.name == "finish" and not results[call.id].error:
                    # It died before it recorded the end.
                    raise SessionEnded(EndReason.FINISH, results[call.id].content)
            elif call.id in self.state.started_calls:
                interrupted = ToolMessage(
                    tool_call_id=call.id,
                    name=call.name,
                    content=prompts.CRASH_INTERRUPTED,
                    arguments=call.arguments,
                    error=True,
                )
                self.append(interrupted)
            else:
                await self.run_tool(call, room)
        if dropped:
            cap = self.h.settings.llm.max_tool_calls_per_reply
            self.append(
                UserMessage(content=reply_limits.dropped_calls(dropped, cap), origin="nudge")
            )
        if not reply.tool_calls:
            # Never two assistant messages in a row: llama-server rejects it, and with a
            # thinking template a trailing assistant message is a refused "prefill".
            self.append(UserMessage(content=prompts.CONTINUE, origin="continue"))
        if cut and reply.tool_calls:
            # Its calls may be cut mid-argument (they got an error result): say why.
            limit = self.h.settings.llm.max_output_tokens
            self.append(UserMessage(content=prompts.cut_off(limit), origin="nudge"))
        self.nudge_if_repeating(reply.tool_calls)
        await self.h.policy.after_step(self.window)

    def append(
        self,
        message: Message,
        usage: CallFigures | None = None,
        tool: ToolRun | None = None,
        admitted: Admitted | None = None,
    ) -> None:
        """A reply carries its usage in the same record, so a crash never leaves one without the
        other (a counted turn whose reply is lost); and what the harness changed of it."""
        record = MessageRecord(
            session=self.state.session,
            message=message,
            usage=usage,
            tool=tool,
            renamed_calls=admitted.renamed or None if admitted else None,
            dropped_calls=admitted.dropped or None if admitted else None,
        )
        self.h.journal.append(record)

    def warn_once(self, kind: str, message: str) -> None:
        if kind not in self.h.warned:
            self.h.warned.add(kind)
            self.h.log.emit("warning", message=message, session=self.state.session)

    def admit(self, completion: Completion) -> Admitted:
        """The reply as it is recorded and run (`reply_limits`); a server whose ids had to be
        replaced is named once a run."""
        s = self.h.settings.llm
        admitted = reply_limits.admit(
            completion.message,
            self.state.call_ids,
            s.max_tool_calls_per_reply,
            s.max_tool_argument_bytes,
        )
        if admitted.renamed:
            reused = ", ".join(sorted({shown(old) for old in admitted.renamed.values()})[:3])
            self.warn_once(
                "call_ids",
                f"the server sent tool-call ids that are repeated or no ids ({reused}): the "
                "harness gives such calls ids of its own, and journals which (warned once per run)",
            )
        usage = completion.usage
        limit = self.h.counting.limit
        rejected = completion.rejected or (
            usage and above_window(usage.prompt_tokens, usage.completion_tokens, limit)
        )
        if rejected:
            self.warn_once(f"usage_{rejected.kind}", usage_warning(rejected))
        return admitted

    async def call_model(self) -> tuple[Completion, int]:
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
                    self.learn_refused(e.n_prompt_tokens, raw_prompt)
                if attempt == 2 or not await self.h.policy.after_overflow(self.window):
                    raise SessionEnded(EndReason.CONTEXT_OVERFLOW, str(e)[:200]) from e
                continue
            # Figures of the reply as generated: its tokens came back in the server's count.
            figures = self.window.figures(completion, raw_prompt, self.state.session_turns + 1)
            admitted = self.admit(completion)
            self.append(admitted.message, figures, admitted=admitted)
            self.window.check_cache(messages, figures)
            if figures.silent_truncation:
                self.h.log.emit(
                    "silent_truncation",
                    message="the server counted far fewer prompt tokens than were sent: it "
                    "probably cut the prompt (Ollama does so silently); treating the context "
                    "as full",
                    session=self.state.session,
                    reported_prompt_tokens=figures.prompt_tokens,
                    estimated_prompt_tokens=figures.estimated_prompt_tokens,
                    context_limit=self.h.budget.limit,
                )
            return replace(completion, message=admitted.message), admitted.dropped
        raise AssertionError("unreachable")

    def learn_refused(self, n_prompt_tokens: int, raw_prompt: RawTally) -> None:
        """The exact count of a refused prompt teaches the calibration, if it can be true."""
        rejected = refused_count(n_prompt_tokens, self.h.ledger.project(raw_prompt))
        if rejected:
            self.warn_once(f"usage_{rejected.kind}", usage_warning(rejected))
            return
        m = Ledger.refused(n_prompt_tokens, raw_prompt)
        self.h.journal.append(Refused(session=self.state.session, **m.model_dump()))

    async def run_tool(self, call: ToolCall, room: Fit | None = None) -> None:
        if (size := reply_limits.omitted_bytes(call)) is not None:
            cap = self.h.settings.llm.max_tool_argument_bytes
            error = reply_limits.too_long(size, cap)
            refused = ToolMessage(
                tool_call_id=call.id,
                name=call.name,
                content=error,
                arguments=call.arguments,
                error=True,
            )
            self.append(refused, tool=ToolRun(duration_s=0, output_bytes=0, error=error))
            return
        started = ToolStarted(session=self.state.session, call_id=call.id, name=call.name)
        self.h.journal.append(started)
        outcome = await self.h.tools.run(call, room)
        run = ToolRun(
            duration_s=round(outcome.duration_s, 3),
            output_bytes=outcome.original_bytes,
            error=outcome.error,
            blocked=outcome.blocked,
        )
        self.append(outcome.message, tool=run)
        if outcome.finish_summary is not None:
            raise SessionEnded(EndReason.FINISH, outcome.finish_summary)

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
            # The first message after its results tells of dropped calls: not yet, if none.
            dropped = 0 if answered else self.state.dropped_calls
            await self.act_on(reply, resuming=True, dropped=dropped)

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
            raise SessionEnded(EndReason.MAX_TOTAL_TURNS, f"{st.total_turns} turns in the run")
        if s.supervisor.max_total_tokens and st.total_tokens >= s.supervisor.max_total_tokens:
            raise SessionEnded(EndReason.MAX_TOTAL_TOKENS, f"{st.total_tokens:,} tokens in the run")
        elapsed = time.time() - (st.started_at or time.time())
        if s.supervisor.max_wall_time_s and elapsed >= s.supervisor.max_wall_time_s:
            raise SessionEnded(EndReason.MAX_WALL_TIME, f"{elapsed:.0f} s since the run started")
        # After the run's limits: a run at its end must not restart for a session limit.
        if s.session.max_turns and st.session_turns >= s.session.max_turns:
            raise SessionEnded(EndReason.MAX_TURNS, f"{st.session_turns} turns in this session")
