"""One session: call the model, record, run tools, record, let the context policy decide; until
it must end.

Control flow leaves the loop only as `SessionEnded` (the supervisor decides what follows) or as a
fatal `LLMError`; everything else that can go wrong inside a step becomes a message to the model.
What to do as the window fills is decided by the pure `context.policy`; `carry_out` does it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from ouroboros.context.ledger import Counting
from ouroboros.context.tokens import Budget, CallFigures
from ouroboros.ground import prompts
from ouroboros.ground.clock import SYSTEM_CLOCK, Clock
from ouroboros.ground.config import Settings
from ouroboros.ground.figures import WindowFigures
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ouroboros.ground.timestamps import wall_time
from ouroboros.model import reply_reader, tool_protocol
from ouroboros.model.llm import Completion, ContextOverflow, Model
from ouroboros.model.retry import Retry, journalled, retrying
from ouroboros.model.tool_protocol import Admitted, admitted_reply, was_cut
from ouroboros.policy import policy, result_room, room
from ouroboros.policy.policy import ContextPolicy, Decision, End, FreeRoom
from ouroboros.policy.room import Rules
from ouroboros.run import window
from ouroboros.run.call_notices import (
    cache_reuse,
    call_figures,
    learn_refused,
    overflow,
    reply_notices,
    silent_truncation,
)
from ouroboros.run.compaction import compact, compaction_requested, drop_compaction_request
from ouroboros.run.instructions import task_of
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal
from ouroboros.state.plan import plan_saved
from ouroboros.state.records import (
    Cut,
    EndReason,
    Mask,
    MessageRecord,
    ToolRun,
    ToolStarted,
)
from ouroboros.tools import ToolOutcome, Tools
from ouroboros.tools.builtin import files_seen, finish_summary
from ouroboros.tools.results import Fit


class SessionEnded(Exception):
    """The session is over; `reason` tells the supervisor whether to restart or stop."""

    def __init__(self, reason: EndReason, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class Feature:
    """A feature the run calls at its points (the operator's, the checkpoints'): built by the
    wiring, passed in `Parts`. Each point does nothing unless the feature says otherwise."""

    async def before_call(self, prompt_budget: int) -> None:
        """At the safe point before each model call, the step before it whole."""

    async def between_sessions(self) -> End | None:
        """A session ended and the next is to start (not before the first); an `End` stops the
        run instead."""
        return None

    async def tool_ran(self, call: ToolCall, outcome: ToolOutcome) -> ToolOutcome:
        """A call's outcome before it is recorded: what the feature adds to it, or refuses."""
        return outcome

    async def session_starting(self, session: int) -> None:
        """Before session `session`'s start is journalled."""

    def opening(self, state: RunState) -> tuple[str, bool]:
        """What the next session's opening says of it, and whether that session may carry the
        last steps over (after a rewind their files are gone)."""
        return "", True

    def result(self, message: ToolMessage) -> ToolMessage:
        """A call's result as it is to be recorded and shown (a repeated dead end's is noted)."""
        return message


@dataclass(frozen=True)
class Parts:
    """What a run's sessions work with, built once from the settings and what the server is
    (`wiring.build_parts`)."""

    settings: Settings
    model: Model
    tools: Tools
    journal: Journal
    rules: Rules
    counting: Counting
    policy: ContextPolicy = policy.MANAGED
    clock: Clock = SYSTEM_CLOCK
    fit_tools: Callable[[Budget], None] | None = None
    """Sizes the tools' caps for a window's lines (None: tools whose caps are fixed)."""
    server: window.ServerWindow | None = None
    """Asks the server its window again (None: an in-process model, whose window is fixed)."""
    features: tuple[Feature, ...] = ()
    files_view: Callable[[Sequence[str]], tuple[str, list[str]]] | None = None
    """The files protocol's: the workspace's files as a session's opening shows them, those
    given first, and the paths shown whole (None: no file is shown)."""

    def fitted(self, figures: WindowFigures | None) -> Parts:
        """These parts for the window in force (a refusal may have stated a smaller one)."""
        if figures is None or figures.context_limit == self.rules.budget.limit:
            return self
        rules, counting = window.fit(self.rules, self.counting, figures)
        if self.fit_tools is not None:
            self.fit_tools(rules.budget)
        return replace(self, rules=rules, counting=counting)


class Session:
    def __init__(self, parts: Parts):
        self.parts = parts
        self.settings, self.model, self.tools = parts.settings, parts.model, parts.tools
        self.journal, self.rules, self.policy = parts.journal, parts.rules, parts.policy
        self.counting, self.clock = parts.counting, parts.clock
        self.state = parts.journal.state
        # Decided once: every request of the session starts the same (the server's cache holds).
        self.schemas = parts.tools.schemas(self.state.session)
        system = self.state.messages[0] if self.state.messages else None
        self.task = task_of(system.content) if isinstance(system, SystemMessage) else None
        """The task the opening gives (`# Purpose`): an unknown tool's answer reads it."""

    async def run(self) -> None:
        """The loop. Returns never: it ends by raising SessionEnded."""
        st = self.state
        if st.refusal_window is not None:
            # The step before the refused call was whole: the kill may have come before the
            # window the refusal stated was taken, and the step's policy decided in the old one.
            self.take_window(ContextOverflow(st.refusal, n_ctx=st.refusal_window))
        else:
            await self.finish_interrupted_step()
        if st.refused_unanswered:
            await self.room_after_refusal()
        while True:
            self.check_limits()
            # After the limits: a message goes to a session that makes a call with it.
            for feature in self.parts.features:
                await feature.before_call(self.rules.budget.prompt_budget)
            reply, dropped = await self.call_model()
            if st.drawn_again:  # an empty reply, left out: the same prompt is asked again
                await self.after_step()
                continue
            at_max_tokens = reply.finish_reason == "length"
            await self.act_on(reply.message, at_max_tokens=at_max_tokens, dropped=dropped)

    async def act_on(
        self,
        reply: AssistantMessage,
        resuming: bool = False,
        at_max_tokens: bool = False,
        dropped: int = 0,
    ) -> None:
        """Run the reply's tool calls (or ask it to go on), then let the policy decide.

        After a crash the same step is finished from the journal: calls with a result are
        skipped, calls started without one get an 'interrupted' result and are never re-run.
        """
        history = self.state.messages
        results = {m.tool_call_id: m for m in history if isinstance(m, ToolMessage)}
        last = max(i for i, m in enumerate(history) if isinstance(m, AssistantMessage))
        told = history[last + 1 :] if resuming else []
        if not resuming:
            results = {}
        step = room.step_figures(self.state, self.rules)
        share = result_room.result_room(self.state, self.rules, step, len(reply.tool_calls))
        fits = partial(result_room.fitting_bytes, self.state, share)
        for call in reply.tool_calls:
            if call.id in results:
                if call.name == "finish" and not results[call.id].error:
                    # It died before it recorded the end: the end it would have recorded.
                    raise SessionEnded(EndReason.FINISH, finish_summary(call))
            elif call.id in self.state.started_calls:
                self.append(self.error_result(call, prompts.CRASH_INTERRUPTED))
            else:
                await self.run_tool(call, fits)
        for message in self.told_after_step(reply, at_max_tokens, dropped):
            if message not in told:  # a resumed step: what it was told before the crash stays
                self.append(message)
        await self.after_step()

    def told_after_step(
        self, reply: AssistantMessage, at_max_tokens: bool, dropped: int
    ) -> list[UserMessage]:
        """What the agent is told once the step's results are in."""
        llm, told = self.settings.llm, []
        if dropped:
            message = tool_protocol.dropped_calls(dropped, len(reply.tool_calls))
            told.append(UserMessage(content=message, origin="nudge"))
        text = tool_protocol.text_in_force(llm.tool_protocol, self.state)
        streak = self.state.replies_without_calls - (0 if reply.tool_calls else 1)
        answer = reply_reader.answer(
            self.state.cut_off_text or reply.content,
            bool(reply.tool_calls),
            self.state.unknown_tools,
            self.schemas,
            text,
            at_max_tokens,
            llm.max_output_tokens,
            streak,
            self.task,
            llm.files_protocol,
        )
        if answer is not None:
            # Never two assistant messages in a row: llama-server rejects it, and with a
            # thinking template a trailing assistant message is a refused "prefill".
            origin = "nudge" if reply.tool_calls else "continue"
            told.append(UserMessage(content=answer, origin=origin))
        last = reply.tool_calls[-1] if reply.tool_calls else None
        native = not self.state.calls_read
        if at_max_tokens and last is not None and native and not dropped and not was_cut(last):
            # Its calls may be cut off mid-argument (a cut one's error result says so itself);
            # not those that ran where later ones were dropped, nor calls read from the text,
            # which are whole (a reply of one call again and again to the limit runs it once).
            told.append(UserMessage(content=prompts.cut_off(llm.max_output_tokens), origin="nudge"))
        return told

    async def after_step(self) -> None:
        """The policy's phases in order, each deciding on what the one before did."""
        requested = compaction_requested(self.settings.paths.state_dir)
        step = room.step_figures(self.state, self.rules, requested)
        for phase in self.policy.after_step:
            for decision in phase(self.state, self.rules, step):
                await self.carry_out(decision)

    async def carry_out(self, decision: Decision) -> None:
        """The one place the policy's decisions take effect."""
        if isinstance(decision, End):
            raise SessionEnded(decision.reason, decision.detail)
        if isinstance(decision, FreeRoom):
            await self.free_room(decision)
            return
        if isinstance(decision, Mask):
            # A placeholder says where the whole result can be read again: make it true first
            # (a file read is read again from the file).
            results = [self.state.view.result(call_id) for call_id in decision.call_ids]
            await self.tools.save_whole([m for m in results if m.name != "file_read"])
        elif isinstance(decision, Cut):
            await self.tools.save_whole(self.state.view.unseen())  # where the cut marker says
        self.journal.append(decision)

    async def free_room(self, freeing: FreeRoom) -> None:
        for index, means in enumerate(freeing.order):
            wanted = policy.still_wanted(self.state, self.rules, freeing, means, first=index == 0)
            if wanted != "try":
                if wanted == "done":
                    return
                continue
            if means == "compact":
                if freeing.forced:
                    drop_compaction_request(self.settings.paths.state_dir)
                parts = (self.model, self.settings, self.journal, self.rules, self.counting)
                if await compact(*parts, self.clock, freeing.forced):
                    return
                continue
            mask = policy.mask_down_to(
                self.state, self.rules, freeing.target, freeing.reason, freeing.waits_below
            )
            if mask is not None:
                await self.carry_out(mask)

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
            **(admitted.record_fields() if admitted else {}),
            plan=plan_saved(message),
        )
        self.journal.append(record)

    async def call_model(self) -> tuple[Completion, int]:
        """One completion; an overflow lets the policy make room and retries exactly once."""
        retried = False

        def on_retry(retry: Retry) -> None:
            nonlocal retried
            retried = True
            journalled(self.journal)(retry)

        for attempt in (1, 2):
            raw_prompt = room.raw_prompt(self.state, self.rules)
            messages = self.state.view.messages()
            call = partial(self.model.complete, messages, self.schemas)
            try:
                completion = await retrying(call, self.settings.llm, on_retry, self.clock)
            except ContextOverflow as e:
                overflow(self.journal, e, room.projected(self.state, self.rules), attempt)
                learn_refused(self.journal, e, raw_prompt)
                self.take_window(e)
                if e.n_ctx is None:  # a refusal that names no window: the server may say it
                    await self.reread()
                if attempt == 2:
                    raise SessionEnded(EndReason.CONTEXT_OVERFLOW, self.state.refusal[:200]) from e
                await self.room_after_refusal()
                continue
            # Figures of the reply as generated: its tokens came back in the server's count.
            st, turn = self.state, self.state.session_turns + 1
            figures = call_figures(st, self.rules, self.counting, completion, raw_prompt, turn)
            before = st.last_request
            admitted = admitted_reply(completion, st.call_ids, self.settings.llm)
            reply_notices(self.journal, completion, admitted, self.counting)
            self.append(admitted.message, figures, admitted=admitted)
            cache_reuse(self.journal, before, messages, figures.cached_tokens)
            silent_truncation(self.journal, figures, self.rules.budget.limit)
            # It answered after failing, or cut the prompt without a word (Ollama reloaded with
            # a smaller num_ctx): it may have been restarted or reloaded with another window.
            if retried or figures.silent_truncation:
                await self.reread()
            return replace(completion, message=admitted.message), admitted.dropped
        raise AssertionError("unreachable")

    def take_window(self, refusal: ContextOverflow) -> None:
        """The smaller window a refusal stated, from the next request on (and for the next
        session's carry-over)."""
        if stated := window.take_stated(self.journal, self.settings, refusal):
            self.fit(stated)

    async def reread(self) -> None:
        """The server's window asked again: a change is in force from the next request on."""
        if await window.reread(self.parts.server, self.journal, self.settings):
            self.fit(self.state.window)

    def fit(self, figures: WindowFigures | None) -> None:
        self.parts = self.parts.fitted(figures)
        self.rules, self.counting = self.parts.rules, self.parts.counting

    async def room_after_refusal(self) -> None:
        """The policy's answer to a refused prompt, carried out; none ends the session."""
        decisions = self.policy.after_overflow(self.state, self.rules)
        if not decisions:
            raise SessionEnded(EndReason.CONTEXT_OVERFLOW, self.state.refusal[:200])
        for decision in decisions:
            await self.carry_out(decision)

    def error_result(self, call: ToolCall, error: str) -> ToolMessage:
        return ToolMessage(
            tool_call_id=call.id,
            name=call.name,
            content=error,
            arguments=call.arguments,
            error=True,
        )

    def result_of(self, message: ToolMessage) -> ToolMessage:
        for feature in self.parts.features:
            message = feature.result(message)
        return message

    async def run_tool(self, call: ToolCall, fits: Fit) -> None:
        if (error := tool_protocol.not_run(call, self.settings.llm)) is not None:
            tool = ToolRun(duration_s=0, output_bytes=0, error=error)
            self.append(self.result_of(self.error_result(call, error)), tool=tool)
            return
        started = ToolStarted(session=self.state.session, call_id=call.id, name=call.name)
        self.journal.append(started)
        seen = files_seen(self.state.messages) | self.state.shown_files
        outcome = await self.tools.run(call, fits, seen)
        for feature in self.parts.features:
            outcome = await feature.tool_ran(call, outcome)
        run = ToolRun(
            duration_s=round(outcome.duration_s, 3),
            output_bytes=outcome.original_bytes,
            error=outcome.error,
            blocked=outcome.blocked,
        )
        self.append(self.result_of(outcome.message), tool=run)
        if outcome.finish_summary is not None:
            raise SessionEnded(EndReason.FINISH, outcome.finish_summary)

    async def finish_interrupted_step(self) -> None:
        """After a crash: complete the step the journal shows was under way, if any."""
        messages = self.state.messages
        last = max(
            (i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)), default=None
        )
        if last is None:
            return
        reply = messages[last]
        assert isinstance(reply, AssistantMessage)
        answered = any(isinstance(m, UserMessage) for m in messages[last + 1 :])
        if reply.tool_calls or not answered:
            # The first message after its results tells of dropped calls: not yet, if none.
            dropped = 0 if answered else self.state.dropped_calls
            # A reply cut off at the limit is answered from its text as written (where a call
            # it was writing stops), not from the placeholder the view shows.
            written = self.state.cut_off_text
            if written is not None:
                reply = reply.model_copy(update={"content": written})
            cut_off = written is not None
            await self.act_on(reply, resuming=True, at_max_tokens=cut_off, dropped=dropped)
        else:
            await self.after_step()  # answered, but what the policy decided after may be cut off

    def check_limits(self) -> None:
        s, st = self.settings, self.state
        if s.supervisor.max_total_turns and st.total_turns >= s.supervisor.max_total_turns:
            raise SessionEnded(EndReason.MAX_TOTAL_TURNS, f"{st.total_turns} turns in the run")
        if s.supervisor.max_total_tokens and st.total_tokens >= s.supervisor.max_total_tokens:
            raise SessionEnded(EndReason.MAX_TOTAL_TOKENS, f"{st.total_tokens:,} tokens in the run")
        elapsed = wall_time(st.started_at, self.clock.now())
        if s.supervisor.max_wall_time_s and elapsed >= s.supervisor.max_wall_time_s:
            raise SessionEnded(EndReason.MAX_WALL_TIME, f"{elapsed:.0f} s since the run started")
        # After the run's limits: a run at its end must not restart for a session limit.
        if s.session.max_turns and st.session_turns >= s.session.max_turns:
            raise SessionEnded(EndReason.MAX_TURNS, f"{st.session_turns} turns in this session")
