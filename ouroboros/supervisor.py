"""The run: one supervisor per state folder, sessions in a loop, restarts, resume after a crash."""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass

import anyio
from rich.console import Console

from ouroboros import prompts
from ouroboros.config import Settings
from ouroboros.context.carryover import recent_actions, select_carryover
from ouroboros.context.truncate import shown
from ouroboros.events import EventLog
from ouroboros.harness import Harness, SessionEnded, build_harness
from ouroboros.journal import StorageFull
from ouroboros.llm import FatalError, LLMClient, LLMError
from ouroboros.lock import (
    RunError,
    journal_missing,
    mark_started,
    state_lock,
    wait_for_resume,
)
from ouroboros.messages import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage
from ouroboros.session import Session
from ouroboros.state import RESTARTING_REASONS, Journal
from ouroboros.tokens import tools_estimate

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
    def __init__(self, settings: Settings, log: EventLog):
        self.settings = settings
        self.log = log
        journal_missing(settings.paths.state_dir)
        self.journal = Journal(settings.paths.state_dir / "journal.jsonl")
        if self.journal.torn_aside:
            log.emit(
                "warning",
                message=f"dropped a torn last journal line (kept in "
                f"{self.journal.torn_aside.name})",
            )
        self.llm = LLMClient(settings.llm)
        self.harness: Harness | None = None

    async def run(self) -> RunOutcome:
        state = self.journal.state
        if state.run_end:
            return RunOutcome(f"this run already ended ({state.run_end}); use --fresh", 0)
        self.harness = harness = await self.build_harness()
        if state.started_at is None:
            mark_started(self.settings.paths.state_dir)
            self.journal.record(
                "run_start", model=self.settings.llm.model, base_url=self.settings.llm.base_url
            )
        self.log.emit(
            "run_start",
            model=self.settings.llm.model,
            session=state.session or 1,
            resumed=state.session > 0,
        )
        while True:
            if not state.session_open:
                outcome = await self.next_session(harness)
                if outcome:
                    return outcome
            try:
                await Session(harness).run()
            except SessionEnded as end:
                outcome = self.session_ended(end)
                if outcome:
                    return outcome

    async def build_harness(self) -> Harness:
        return await build_harness(self.settings, self.llm, self.journal, self.log)

    def session_ended(self, end: SessionEnded) -> RunOutcome | None:
        state = self.journal.state
        if self.harness is not None:
            self.harness.tools.end_session()  # the background jobs its commands left
        self.log.emit(
            "session_end",
            session=state.session,
            reason=end.reason,
            detail=end.detail,
            turns=state.session_turns,
        )
        if end.reason == "finish":
            self.journal.record("run_end", reason="finish", summary=end.detail)
            return self.finished("finish")
        if end.reason not in RESTARTING_REASONS:
            # Run limits leave the session open: raising the limit and running again continues it.
            return self.finished(end.reason)
        if state.session_turns == 0:
            raise RunError(
                "a fresh session does not fit the context window: the system prompt and tools "
                f"alone exceed the budget ({end.detail}); shorten SYSTEM_PROMPT.md or get a larger "
                "window"
            )
        self.journal.record(
            "session_end", session=state.session, reason=end.reason, turns=state.session_turns
        )
        return None

    def finished(self, reason: str) -> RunOutcome:
        self.log.emit(
            "run_end",
            reason=reason,
            session=self.journal.state.session,
            turns=self.journal.state.total_turns,
        )
        return RunOutcome(reason, 0)

    async def next_session(self, harness: Harness) -> RunOutcome | None:
        state = self.journal.state
        if state.session == 0:
            self.start_session(harness, 1, "fresh", [])
            return None
        limit = self.settings.supervisor.max_restarts
        if limit is not None and state.restarts >= limit:
            return self.finished("max_restarts")
        if not self.settings.supervisor.auto_restart:
            await wait_for_resume(self.settings.paths.state_dir, self.log)
        carry = await self.carryover(harness, state.messages)
        self.start_session(harness, state.session + 1, state.ended_reason or "restart", carry)
        return None

    async def carryover(self, harness: Harness, previous: list[Message]) -> list[Message]:
        """The last step always (whole where the fresh session has room below its soft line),
        then earlier steps within a share of that room."""
        calibration = harness.ledger.calibration

        def tokens(message: Message) -> int:
            return calibration.message_tokens(
                shown(message) if isinstance(message, ToolMessage) else message
            )

        fixed = tokens(self.system_message(harness)) + calibration.tokens(
            tools_estimate(harness.tools.schemas()) + OPENING_ALLOWANCE
        )
        capacity = harness.ledger.budget.soft_line - fixed
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
        await harness.tools.save_whole(
            [m for m in previous if isinstance(m, ToolMessage) and m.tool_call_id in shortened]
        )
        return carried

    def system_message(self, harness: Harness) -> SystemMessage:
        s = self.settings
        try:
            instructions = s.paths.system_prompt.read_text()
        except OSError as e:
            raise RunError(
                f"cannot read paths.system_prompt {s.paths.system_prompt}: {e.strerror}"
            ) from None
        return SystemMessage(
            content=prompts.system_prompt(
                instructions,
                s.paths.workspace,
                s.paths.system_prompt,
                harness.ledger.budget.limit,
                s.supervisor.allow_finish,
            )
        )

    def start_session(
        self,
        harness: Harness,
        number: int,
        reason: str,
        carried: list[Message],
    ) -> None:
        """Record the new session and its opening messages in one journal line (atomic)."""
        state = self.journal.state
        previous_turns = state.session_turns
        system = self.system_message(harness)
        first = (
            prompts.FIRST_MESSAGE
            if number == 1
            else prompts.restart_marker(
                number,
                previous_turns,
                reason,
                len(carried),
                recent_actions(state.messages, self.settings.context.ambient_actions),
            )
        )
        opening: list[Message] = [system, UserMessage(content=first, origin="restart"), *carried]
        if isinstance(opening[-1], AssistantMessage) and not opening[-1].tool_calls:
            opening.append(UserMessage(content=prompts.CONTINUE, origin="continue"))
        self.journal.record(
            "session_start",
            session=number,
            reason=reason,
            previous_turns=previous_turns,
            carried=len(carried),
            messages=[m.model_dump() for m in opening],
        )
        if number > 1:
            self.log.emit(
                "session_restart",
                session=number,
                previous_turns=previous_turns,
                carried_messages=len(carried),
                reason=reason,
                restarts=state.restarts,
            )
        self.log.emit("session_start", session=number, reason=reason)


async def run(settings: Settings, log: EventLog) -> RunOutcome:
    """Run until a limit, a finish, a stop signal or a fatal error."""
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with state_lock(settings.paths.state_dir, log):
        supervisor = Supervisor(settings, log)
        outcome = RunOutcome("stopped", 0)
        failure: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:

                async def stop_on_signal() -> None:
                    try:
                        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                            async for signum in signals:
                                name = signal.Signals(signum).name
                                log.emit(
                                    "run_end", reason="stopped", message=f"stop requested ({name})"
                                )
                                tg.cancel_scope.cancel()
                                return
                    finally:
                        # The run is winding down: a second Ctrl-C must not turn a clean stop
                        # into a KeyboardInterrupt traceback.
                        signal.signal(signal.SIGINT, signal.SIG_IGN)
                        signal.signal(signal.SIGTERM, signal.SIG_IGN)

                async def supervise() -> None:
                    nonlocal outcome, failure
                    try:
                        outcome = await supervisor.run()
                    except (LLMError, RunError, StorageFull) as e:
                        failure = e
                    tg.cancel_scope.cancel()

                tg.start_soon(stop_on_signal)
                tg.start_soon(supervise)
        finally:
            await supervisor.llm.aclose()
            if supervisor.harness is not None:
                supervisor.harness.tools.close()
            supervisor.journal.close()
            signal.signal(signal.SIGINT, handlers[0])
            signal.signal(signal.SIGTERM, handlers[1])
        if failure is not None:
            message = str(failure)
            if isinstance(failure, LLMError) and not isinstance(failure, FatalError):
                message = f"gave up on the model server: {message}"
            with contextlib.suppress(StorageFull):  # the log's disk may be the full one
                log.emit("error", message=message)
            raise RunError(message)
        return outcome


def run_to_end(settings: Settings, console: Console) -> RunOutcome:
    """`run` from synchronous code, with the logs opened and closed around it."""
    log = EventLog(settings.paths.state_dir, console)
    try:
        return anyio.run(run, settings, log)
    finally:
        log.close()
