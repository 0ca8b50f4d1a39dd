"""The run: one supervisor per state folder, sessions in a loop, restarts, resume after a crash."""

from __future__ import annotations

from dataclasses import dataclass

from ouroboros.context.carryover import recent_actions, select_carryover
from ouroboros.context.plan import in_opening
from ouroboros.context.tokens import tools_estimate
from ouroboros.context.truncate import shown
from ouroboros.ground import prompts
from ouroboros.ground.errors import RunError
from ouroboros.ground.figures import RunLimits, WindowFigures
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from ouroboros.model.reply_reader import task_files
from ouroboros.run import window
from ouroboros.run.instructions import system_message, task_of
from ouroboros.run.lock import mark_started
from ouroboros.run.session import Parts, Session, SessionEnded
from ouroboros.state.records import EndReason, RunEnd, RunStart, SessionEnd, SessionStart

CARRYOVER_SHARE = 0.25
"""Of the room under the soft line, what the steps before the last may fill together with it
(the last step is carried whatever its size): a new session that starts nearly at the soft line
would mask at once and restart again soon."""
OPENING_ALLOWANCE = 200
"""Raw tokens kept for the restart marker (with its list of recent actions) and a continuation
message."""


@dataclass(frozen=True)
class RunOutcome:
    reason: str
    exit_code: int


class Supervisor:
    """Sessions in a loop over one harness: starts, restarts with carry-over, ends."""

    def __init__(self, parts: Parts, window: WindowFigures):
        self.parts, self.window = parts, window
        self.settings, self.journal = parts.settings, parts.journal

    async def run(self) -> RunOutcome:
        state = self.journal.state
        resumed = state.started_at is not None
        self.journal.append(self.run_start(resumed))
        if not resumed:  # only once the run start is on disk: a run that began can resume
            mark_started(self.settings.paths.state_dir)
        while True:
            self.parts = self.parts.fitted(state.window)  # a refusal may have stated a smaller
            if not state.session_open and state.ended_reason == EndReason.FINISH:
                # It stopped between the finish's session end and the run's.
                return self.finished(EndReason.FINISH, state.ended_detail)
            if not state.session_open:
                outcome = await self.next_session()
                if outcome:
                    return outcome
            try:
                await Session(self.parts).run()
            except SessionEnded as end:
                outcome = self.session_ended(end)
                if outcome:
                    return outcome

    def run_start(self, resumed: bool) -> RunStart:
        s = self.settings
        return RunStart(
            model=s.llm.model,
            base_url=s.llm.base_url,
            resumed=resumed,
            window=self.window,
            limits=RunLimits.of(s),
        )

    def session_ended(self, end: SessionEnded) -> RunOutcome | None:
        state = self.journal.state
        self.parts.tools.end_session()  # the background jobs its commands left
        if not end.reason.restarts and end.reason != EndReason.FINISH:
            # Run limits leave the session open: raising the limit and running again continues it.
            return self.finished(end.reason, end.detail)
        carried = any(isinstance(m, AssistantMessage) for m in state.messages)
        if end.reason.restarts and state.session_turns == 0 and not carried:
            raise RunError(
                "a fresh session does not fit the context window: the system prompt and tools "
                f"alone exceed the budget ({end.detail}); shorten SYSTEM_PROMPT.md or get a larger "
                "window"
            )
        self.journal.append(
            SessionEnd(
                session=state.session,
                reason=end.reason,
                detail=end.detail,
                turns=state.session_turns,
            )
        )
        if end.reason == EndReason.FINISH:
            return self.finished(end.reason, end.detail)
        return None

    def finished(self, reason: EndReason, detail: str = "") -> RunOutcome:
        self.journal.append(RunEnd(reason=reason, detail=detail))
        return RunOutcome(reason, 0)

    async def next_session(self) -> RunOutcome | None:
        state = self.journal.state
        if state.session == 0:
            await self.start_session(1, "fresh", [])
            return None
        limit = self.settings.supervisor.max_restarts
        if limit is not None and state.restarts >= limit:
            return self.finished(EndReason.MAX_RESTARTS, f"{state.restarts} restarts")
        for feature in self.parts.features:
            if (end := await feature.between_sessions()) is not None:
                return self.finished(end.reason, end.detail)
        # The server may have been reloaded or restarted with another window since the start.
        await window.reread(self.parts.server, self.journal, self.settings)
        self.parts = self.parts.fitted(state.window)
        # A session that could not make one turn with what it carried: the next carries nothing.
        # Nor does one ended for a loop; after a loop the agent was told of, whatever ended the
        # session (a loop fills the context too), only steps after it are carried: the loop's
        # own are what a model that copies what it sees would go round again.
        system = self.system_message()
        carried = (
            state.session_turns
            and state.ended_reason != EndReason.LOOP
            and all(f.opening(state)[1] for f in self.parts.features)
        )
        since = state.session_loops.since if state.session_loops.named else 0
        carry = await self.carryover(state.messages[since:], system) if carried else []
        await self.start_session(state.session + 1, state.ended_reason or "restart", carry, system)
        return None

    async def carryover(self, previous: list[Message], system: SystemMessage) -> list[Message]:
        """The last step always (whole where the fresh session has room below its soft line),
        then earlier steps within a share of that room."""
        tools = self.parts.tools
        calibration = self.journal.state.ledger.calibration

        def tokens(message: Message) -> int:
            return calibration.message_tokens(
                shown(message) if isinstance(message, ToolMessage) else message
            )

        fixed = tokens(system) + calibration.tokens(
            tools_estimate(tools.schemas()) + OPENING_ALLOWANCE
        )
        # The plan and what the features say (the dead ends' list) open the session whole.
        state = self.journal.state
        said = "".join(feature.opening(state)[0] for feature in self.parts.features)
        fixed += tokens(UserMessage(content=in_opening(state.plan.items) + said))
        capacity = self.parts.rules.budget.soft_line - fixed
        carried = select_carryover(
            previous,
            self.settings.context.carryover_turns,
            capacity,
            int(capacity * CARRYOVER_SHARE),
            tokens,
            self.settings.context.mask_min_tokens,
        )
        # Placeholders and cut markers say where the whole text is: make it true.
        shortened = {
            m.tool_call_id
            for m in carried
            if isinstance(m, ToolMessage)
            and (m.room_bytes is not None or (m.masked and m.name != "file_read"))
        }
        await tools.save_whole(
            [m for m in previous if isinstance(m, ToolMessage) and m.tool_call_id in shortened]
        )
        return carried

    def system_message(self) -> SystemMessage:
        s = self.settings
        last = next((m for m in self.journal.state.messages if isinstance(m, SystemMessage)), None)
        return system_message(s, self.parts.rules.budget, self.journal, last)

    async def start_session(
        self, number: int, reason: str, carried: list[Message], system: SystemMessage | None = None
    ) -> None:
        """Record the new session and its opening messages in one journal line (atomic); the
        first's system message is read after the features' start (a checkpoint)."""
        for feature in self.parts.features:
            await feature.session_starting(number)
        system = system or self.system_message()
        state = self.journal.state
        previous_turns = state.session_turns
        task = task_of(system.content)
        if number == 1:
            first = prompts.first_message(task)
        else:
            # A loop's last actions are the loop: one line names it, without its words.
            loop = state.session_loops.named
            ambient = self.settings.context.ambient_actions
            first = prompts.restart_marker(
                number,
                previous_turns,
                reason,
                len(carried),
                [] if loop else recent_actions(state.messages, ambient),
                state.ended_detail,
                task,
                prompts.loop_line(loop.loop, loop.evidence) if loop else None,
            )
        first += "".join(feature.opening(state)[0] for feature in self.parts.features)
        first += in_opening(state.plan.items)  # whole: its size is capped when it is saved
        files: list[str] = []
        if self.parts.files_view is not None:
            said, files = self.parts.files_view(task_files(task))
            first += said  # last: a small model's change follows the file it changes
        opening: list[Message] = [system, UserMessage(content=first, origin="restart"), *carried]
        if isinstance(opening[-1], AssistantMessage) and not opening[-1].tool_calls:
            said = prompts.CONTINUE_FILES if self.settings.llm.files_protocol else prompts.CONTINUE
            opening.append(UserMessage(content=said, origin="continue"))
        self.journal.append(
            SessionStart(
                session=number,
                reason=reason,
                previous_turns=previous_turns,
                carried=len(carried),
                messages=opening,
                shown=files,
            )
        )
