"""A run from the command: the lock first, then the journal with its sinks, the model server,
the tools, and the supervisor, until a finish, a limit, a stop signal or a fatal error."""

from __future__ import annotations

import contextlib
import signal
from functools import partial

import anyio

from ouroboros.ground.clock import SYSTEM_CLOCK, Clock
from ouroboros.ground.config import Settings
from ouroboros.ground.errors import RunError, SetupError, StateUnwritable
from ouroboros.ground.figures import RunLimits
from ouroboros.ground.state_folder import JOURNAL
from ouroboros.mcp.lifecycle import mcp_servers
from ouroboros.model.llm import FatalError, LLMClient, LLMError, Model
from ouroboros.model.servers import ServerInfo, discover
from ouroboros.operator.hooks import Hooks
from ouroboros.run.lock import refuse_lost_journal, state_lock
from ouroboros.run.session import Parts
from ouroboros.run.supervisor import RunOutcome, Supervisor
from ouroboros.run.window import ServerWindow
from ouroboros.server.process import keep_alive
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.state.journal import Journal
from ouroboros.state.records import EndReason, RunEnd, Starting
from ouroboros.wiring import build_parts, discover_server


def open_journal(
    settings: Settings, log: EventLog, hooks: Hooks, stale_owner: str | None
) -> Journal:
    """The run's journal, with the logs and then the hooks as its sinks (called holding the
    lock: opening them sets aside what a crash left torn), and what opening them found
    journalled."""
    refuse_lost_journal(settings.paths.state_dir)
    journal = Journal(settings.paths.state_dir / JOURNAL)
    journal.sinks.extend(log.sinks())
    if settings.hooks.on:  # else a sink that reads every record to run nothing
        hooks.attach(journal)
    if stale_owner is not None:
        journal.notify("warning", f"took over a stale lock left by pid {stale_owner}")
    if journal.torn_aside:
        journal.notify(
            "warning", f"dropped a torn last journal line (kept in {journal.torn_aside.name})"
        )
    for problem in journal.problems:
        journal.notify("warning", str(problem))
    return journal


async def run(
    settings: Settings,
    log: EventLog,
    model: Model | None = None,
    info: ServerInfo | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> RunOutcome:
    """Run until a limit, a finish, a stop signal or a fatal error; against `settings.llm`'s
    server, or `model` (in-process: tests, benches) whose server is `info`; its wall time and
    retries on `clock`."""
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with state_lock(settings.paths.state_dir) as stale_owner:
        hooks = Hooks(settings.hooks, settings.paths.state_dir)
        journal = open_journal(settings, log, hooks, stale_owner)
        client = LLMClient(settings.llm)
        parts: Parts | None = None
        outcome = RunOutcome("stopped", 0)
        failure: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:

                async def stop_on_signal() -> None:
                    try:
                        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                            async for signum in signals:
                                why = f"stop requested ({signal.Signals(signum).name})"
                                journal.append(RunEnd(reason=EndReason.STOPPED, detail=why))
                                tg.cancel_scope.cancel()
                                return
                    finally:
                        # The run is winding down: a second Ctrl-C must not turn a clean stop
                        # into a KeyboardInterrupt traceback.
                        signal.signal(signal.SIGINT, signal.SIG_IGN)
                        signal.signal(signal.SIGTERM, signal.SIG_IGN)

                def server_gave_up(error: RunError | StateUnwritable) -> None:
                    nonlocal failure
                    failure = error
                    tg.cancel_scope.cancel()

                async def supervise() -> None:
                    nonlocal outcome, failure, parts
                    try:
                        if journal.state.finished:
                            outcome = RunOutcome("this run already finished; use --fresh", 0)
                        else:
                            # Before the server is asked: `status` shows them while it waits.
                            journal.append(Starting(limits=RunLimits.of(settings)))
                            if model is None:
                                await keep_alive(settings, journal, tg, server_gave_up)
                            found = info or await discover_server(settings, client, journal)
                            llm = settings.llm
                            read = partial(discover, client, llm.base_url, llm.model)
                            # A server of the test's own (`info`) has a window that stays.
                            server = None if info else ServerWindow(read, found.context_window)
                            async with mcp_servers(settings, journal) as mcp:
                                parts, window = build_parts(
                                    settings, model or client, found, journal, clock, mcp, server
                                )
                                outcome = await Supervisor(parts, window).run()
                    except (LLMError, RunError, StateUnwritable) as e:
                        failure = e
                    tg.cancel_scope.cancel()

                tg.start_soon(stop_on_signal)
                tg.start_soon(supervise)
        finally:
            await client.aclose()
            if parts is not None:
                parts.tools.close()
            # The run is over: a Ctrl-C while the last hooks get their time must not become a
            # traceback (the handlers come back once they are done).
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if failure is not None:
                message = str(failure)
                if isinstance(failure, LLMError) and not isinstance(failure, FatalError):
                    message = f"gave up on the model server: {message}"
                # The journal may be the file that cannot be written.
                with contextlib.suppress(StateUnwritable):
                    journal.append(RunEnd(reason=EndReason.ERROR, detail=message))
                # A setup mistake stays one: its exit code tells a service manager not to retry.
                kept = SetupError if isinstance(failure, SetupError) else RunError
                failure = kept(message)
            # The last events' hooks (the run's end) are waited for, each at most its timeout.
            with contextlib.suppress(StateUnwritable):
                hooks.close()
            journal.close()
            signal.signal(signal.SIGINT, handlers[0])
            signal.signal(signal.SIGTERM, handlers[1])
        if failure is not None:
            raise failure
        return outcome


def run_to_end(
    settings: Settings, terminal: Terminal, info: ServerInfo | None = None
) -> RunOutcome:
    """`run` from synchronous code, with the logs opened and closed around it; `terminal` shows
    their events as they are written. `info`: the server, where the caller runs its own (the
    demo), else it is discovered."""
    log = EventLog(settings.paths.state_dir, terminal)
    try:
        return anyio.run(run, settings, log, None, info)
    finally:
        log.close()
