"""The run: one supervisor per state folder, sessions in a loop, restarts, resume after a crash."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
from rich.console import Console

from ouroboros import prompts
from ouroboros.config import Settings
from ouroboros.context.carryover import recent_actions, select_carryover
from ouroboros.context.mask import MaskPolicy
from ouroboros.context.truncate import shown
from ouroboros.events import EventLog
from ouroboros.llm import FatalError, LLMClient, LLMError, retrying
from ouroboros.messages import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage
from ouroboros.servers import choose_window, discover
from ouroboros.session import Harness, Session, SessionEnded
from ouroboros.state import RESTARTING_REASONS, Journal
from ouroboros.tokens import MESSAGE_OVERHEAD, Budget, Calibration, Ledger, tools_estimate
from ouroboros.tools import ToolRunner
from ouroboros.tools.workspace import Workspace

BYTES_PER_TOKEN = 4
TOOL_OUTPUT_SHARE = 0.25
"""No single tool output may take more than this share of the prompt budget."""
RESUME_REQUEST = "resume"
"""File in the state folder by which `python -m ouroboros resume` lets a waiting run go on."""
CARRYOVER_SHARE = 0.25
"""Of the room under the soft line, what the steps before the last may fill together with it
(the last step is carried whatever its size): a new session that starts nearly at the soft line
would mask at once and restart again soon."""
OPENING_ALLOWANCE = 200
"""Raw tokens kept for the restart marker (with its list of recent actions) and a continuation
message."""


class RunError(Exception):
    """A run-time problem a person must fix; printed as one line, exit code 1."""


@dataclass(frozen=True)
class RunOutcome:
    reason: str
    exit_code: int


@contextmanager
def state_lock(state_dir: Path, log: EventLog | None = None) -> Iterator[None]:
    """flock is released by the kernel when the owner dies, so only a live owner blocks us."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "lock"
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        handle.close()
        raise RunError(
            f"another supervisor (pid {owner}) is running on {state_dir}; stop it first"
        ) from None
    handle.seek(0)
    previous = handle.read().strip()
    if previous and log is not None:
        log.emit("warning", message=f"took over a stale lock left by pid {previous}")
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    try:
        yield
    finally:
        handle.seek(0)
        handle.truncate()
        handle.close()


def fresh_state(state_dir: Path) -> Path | None:
    """Move an old run aside (never delete it) so the next run starts from nothing."""
    if not state_dir.exists() or not any(state_dir.iterdir()):
        return None
    lock = state_dir / "lock"
    if lock.exists():
        with lock.open("a+") as handle:  # closing it releases the flock at once
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunError(
                    f"a supervisor is running on {state_dir}; stop it before starting afresh"
                ) from None
    aside = state_dir.with_name(f"{state_dir.name}.{time.strftime('%Y%m%d-%H%M%S')}")
    state_dir.rename(aside)
    return aside


def tool_output_cap(settings: Settings, budget: Budget) -> int:
    """Bytes one tool result keeps: a quarter of the prompt budget at most."""
    share = int(budget.prompt_budget * TOOL_OUTPUT_SHARE * BYTES_PER_TOKEN)
    return min(settings.context.max_tool_output_bytes, share)


def mask_policy(settings: Settings, budget: Budget) -> MaskPolicy:
    c = settings.context
    protected_tokens = int(c.protected_max_fraction * budget.prompt_budget)
    return MaskPolicy(c.protected_observations, protected_tokens, c.mask_min_tokens)


class Supervisor:
    def __init__(self, settings: Settings, log: EventLog):
        self.settings = settings
        self.log = log
        self.journal = Journal(settings.paths.state_dir / "journal.jsonl")
        if self.journal.torn_aside:
            log.emit(
                "warning",
                message=f"dropped a torn last journal line (kept in "
                f"{self.journal.torn_aside.name})",
            )
        self.llm = LLMClient(settings.llm)

    async def run(self) -> RunOutcome:
        state = self.journal.state
        if state.run_end:
            return RunOutcome(f"this run already ended ({state.run_end}); use --fresh", 0)
        harness = await self.build_harness()
        if state.started_at is None:
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
        s = self.settings
        info = await retrying(
            lambda: discover(self.llm, s.llm.base_url, s.llm.model), s.llm, self.log.retry
        )
        limit, warning = choose_window(s.context.limit, info)
        if warning:
            self.log.emit("warning", message=warning)
        budget = Budget.for_window(
            limit,
            s.context.soft_threshold,
            s.context.hard_threshold,
            s.llm.max_output_tokens,
            s.context.safety_margin,
        )
        self.log.emit(
            "context_window",
            server=info.kind,
            context_limit=limit,
            detail=info.detail,
            prompt_budget=budget.prompt_budget,
            soft_line=budget.soft_line,
            hard_line=budget.hard_line,
            frame_tokens=info.frame_tokens or MESSAGE_OVERHEAD,
        )
        calibration = Calibration(info.frame_tokens or MESSAGE_OVERHEAD)
        ledger = Ledger(
            budget,
            calibration,
            detect_truncation=info.truncates_silently,
            trust_reported=info.counts_whole_prompt,
        )
        if not info.counts_whole_prompt:
            self.log.emit(
                "warning",
                message=f"{info.detail}: this version reports only the prompt tokens it had to "
                "process, not those it took from its cache, so the harness estimates the context "
                "instead of measuring it (upgrade Ollama to 0.30.1 or later)",
            )
        if info.renders_tools is False:
            self.log.emit(
                "warning",
                message="the model's chat template cannot render tools: the server drops the "
                "tool schemas, so the model never sees its tools (for llama-server, start it "
                "with --chat-template-file of a tool-capable template, or use another model)",
            )
        for m in self.journal.state.measurements:
            ledger.apply(m)
        s.paths.workspace.mkdir(parents=True, exist_ok=True)
        tools = ToolRunner(
            Workspace(s.paths.workspace, s.paths.system_prompt),
            s.session.shell_timeout_s,
            tool_output_cap(s, budget),
            s.supervisor.allow_finish,
            s.paths.state_dir,
        )
        policy = mask_policy(s, budget)
        rendered = info.renders_tools is not False
        return Harness(s, self.llm, tools, self.journal, self.log, ledger, policy, rendered)

    def session_ended(self, end: SessionEnded) -> RunOutcome | None:
        state = self.journal.state
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
            await self.wait_for_resume()
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

    async def wait_for_resume(self) -> None:
        flag = self.settings.paths.state_dir / RESUME_REQUEST
        self.log.emit(
            "waiting",
            message="auto_restart is off: press Enter here, or run "
            "`python -m ouroboros resume`, to start the next session",
        )
        # Polled, not read in a thread: a thread blocked in readline would keep the process
        # alive after the run ends, and swallow the next Enter.
        terminal = sys.stdin is not None and sys.stdin.isatty()
        while not flag.exists():
            if terminal and select.select([sys.stdin], [], [], 0)[0]:
                sys.stdin.readline()
                break
            await anyio.sleep(0.2)
        flag.unlink(missing_ok=True)


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
                    except (LLMError, RunError) as e:
                        failure = e
                    tg.cancel_scope.cancel()

                tg.start_soon(stop_on_signal)
                tg.start_soon(supervise)
        finally:
            await supervisor.llm.aclose()
            supervisor.journal.close()
            signal.signal(signal.SIGINT, handlers[0])
            signal.signal(signal.SIGTERM, handlers[1])
        if failure is not None:
            message = str(failure)
            if isinstance(failure, LLMError) and not isinstance(failure, FatalError):
                message = f"gave up on the model server: {message}"
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
