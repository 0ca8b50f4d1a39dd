"""The model server as a child of the run (`[server] command`): started before the first call
under a launcher that holds it and all it starts (`launch.py`), in the run's cgroup where one
can be made; its output in a size-capped log; ready once the OpenAI endpoint answers; started
again when it exits or stalls, and stopped with the run, all of it.

A run killed with -9 cannot stop it: the kernel tells the launcher (its parent-death signal),
which kills all the server started, and the cgroup's watchdog kills what is in the cgroup. What
both miss is found by the next start from `server.pid` (`pidfile.py`): only what carries the
id of that start is killed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import anyio
import httpx2
from anyio.abc import Process

from ouroboros.ground.config import ServerSettings, Settings
from ouroboros.ground.errors import RunError, SetupError, StateUnwritable
from ouroboros.ground.state_folder import SERVER_LOG, SERVER_PID
from ouroboros.server import launch
from ouroboros.server.files import CappedLog
from ouroboros.server.pidfile import (
    GONE_POLL_S,
    GONE_WITHIN_S,
    SERVER_ID,
    ServerMark,
    boot_id,
    kill_marked,
    kill_orphan,
    write_mark,
)
from ouroboros.server.records import ServerExited, ServerStarted
from ouroboros.server.view import exit_text
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal
from ouroboros.state.records import Notice, Record
from ouroboros.tools.run_cgroup import make_cgroup, start_watchdog

STOP_GRACE_S = 10.0
"""From SIGTERM to SIGKILL when the run stops its server."""
LAUNCHER_SLACK_S = 5.0
"""How much longer than the grace the launcher may take to end; then it is killed too."""
OUTPUT_GRACE_S = 5.0
"""How long the server's output may still come once none of its processes is left."""
READY_POLL_S = 0.2
LAUNCHER = str(Path(launch.__file__))


@dataclass(frozen=True)
class Exit:
    """How a start of the server ended: as the last of its processes did."""

    pid: int
    code: int | None
    signal: str | None
    tail: str
    """The last lines of its log."""
    up_s: float

    def said(self) -> str:
        """How it ended and after how long (`exit_text`)."""
        return exit_text({"code": self.code, "signal": self.signal, "up_s": self.up_s})


@dataclass
class Start:
    """One start of the server, and how it went."""

    process: Process
    at: float
    """When it was started (monotonic)."""
    answered: bool = False
    stopped_for: str = ""
    """Why the run stopped it (a reply that stood still, no answer in time); "" by itself."""
    end: Exit | None = None
    ended_at: float = 0.0

    def story(self) -> str:
        """What happened to it, in a few words."""
        if self.stopped_for:
            return self.stopped_for
        return "exited after answering" if self.answered else "exited before answering"


class ServerGaveUp(RunError):
    """The server kept dying: the run stops with one line naming its log."""


class ServerCgroup:
    """The cgroup the server is started in, where one can be made (`tools/run_cgroup.py`), and
    its watchdog, which kills what is in it and removes it once the run ends, however it
    ends."""

    def __init__(self, wanted: bool) -> None:
        self.path: Path | None = None
        self._watchdog: subprocess.Popen[str] | None = None
        self._tried = not wanted

    def made(self) -> Path | None:
        if not self._tried:
            self._tried = True
            self.path = make_cgroup(f"ouroboros-{os.getpid()}-server-{secrets.token_hex(4)}")
            if self.path is not None:
                self._watchdog = start_watchdog(self.path, None)
        return self.path

    async def kill(self) -> None:
        """Kill what is in it, and wait until it is empty (a port one of them held is free)."""
        if self.path is None:
            return
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        with anyio.move_on_after(GONE_WITHIN_S):
            while self._populated():
                await anyio.sleep(GONE_POLL_S)

    def _populated(self) -> bool:
        assert self.path is not None
        try:
            return "populated 1" in (self.path / "cgroup.events").read_text().splitlines()
        except OSError:
            return False

    async def close(self) -> None:
        if self._watchdog is not None and self._watchdog.stdin is not None:
            with contextlib.suppress(OSError):
                self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                await anyio.to_thread.run_sync(partial(self._watchdog.wait, 10))


def times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def what_happened(starts: list[Start]) -> str:
    """How these starts ended, counted by kind, and the last one's exit."""
    stories: dict[str, int] = {}
    for start in starts:
        stories[start.story()] = stories.get(start.story(), 0) + 1
    said = ", ".join(f"{story} {times(count)}" for story, count in stories.items())
    last = starts[-1].end
    return f"{said}; the last time, {last.said()}" if last is not None else said


class ManagedServer:
    """Keeps the server of `settings` running for as long as `serve` runs; `on_start(pid)` and
    `on_exit(exit)` are told of each start and exit (the run journals them), `on_warning` of
    what a killed run left. Without `use_cgroup`, only the launcher holds what it starts
    (as where no cgroup can be made)."""

    def __init__(
        self,
        settings: ServerSettings,
        base_url: str,
        state_dir: Path,
        on_start: Callable[[int], None],
        on_exit: Callable[[Exit], None],
        on_warning: Callable[[str], None],
        use_cgroup: bool = True,
    ):
        self.settings, self.state_dir = settings, state_dir
        self.models_url = base_url.rstrip("/") + "/models"
        self.on_start, self.on_exit, self.on_warning = on_start, on_exit, on_warning
        self.log = CappedLog(state_dir / SERVER_LOG, settings.log_max_bytes)
        self.cgroup = ServerCgroup(use_cgroup)
        self.current: Start | None = None
        self.starts: list[Start] = []

    async def serve(self, ready: anyio.Event) -> None:
        """Start the server, set `ready` once it first answers, start it again whenever it
        exits; raises `ServerGaveUp` once it stops more than `max_restarts` times within
        `restart_window_s` (a start that never answers is a stop), or more than `max_restarts`
        starts in a row never answer."""
        try:
            while True:
                async with self._running() as start:
                    start.answered = await self._ready(start.process)
                    if start.answered:
                        ready.set()
                        await start.process.wait()
                    elif start.process.returncode is None:
                        start.stopped_for = (
                            "did not answer within server.ready_timeout_s "
                            f"({self.settings.ready_timeout_s:g} s)"
                        )
                self._give_up_if_dying()
        finally:
            self.log.close()
            with anyio.CancelScope(shield=True):
                await self.cgroup.close()

    def _give_up_if_dying(self) -> None:
        settings, now = self.settings, time.monotonic()
        recent = [s for s in self.starts if s.ended_at >= now - settings.restart_window_s]
        if len(recent) > settings.max_restarts:
            raise ServerGaveUp(
                f"the model server stopped {times(len(recent))} in {now - recent[0].at:.1f} s, "
                f"more than server.max_restarts ({settings.max_restarts}) allows within "
                f"server.restart_window_s ({settings.restart_window_s:g} s): it "
                f"{what_happened(recent)}; its output is in "
                f"{self.log.path}"
            )
        # Starts that each wait `ready_timeout_s` may be spread wider than the window.
        unanswered: list[Start] = []
        for start in reversed(self.starts):
            if start.answered:
                break
            unanswered.insert(0, start)
        if len(unanswered) > settings.max_restarts:
            raise ServerGaveUp(
                f"the model server never answered: {len(unanswered)} starts in a row; it "
                f"{what_happened(unanswered)}; its output is in "
                f"{self.log.path}"
            )
        # Either rule gives up at max_restarts + 1 starts: older ones can never count.
        del self.starts[: -(settings.max_restarts + 1)]

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[Start]:
        if left := await kill_orphan(self.state_dir):
            self.on_warning(left)
        server_id = secrets.token_hex(16)
        command = [
            sys.executable,
            "-I",
            "-S",
            LAUNCHER,
            str(os.getpid()),
            f"{STOP_GRACE_S:g}",
            str(self.cgroup.made() or ""),
            *self.settings.command,
        ]
        process = await anyio.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one log, in the order written
            start_new_session=True,
            env={**os.environ, SERVER_ID: server_id},
        )
        start = self.current = Start(process, time.monotonic())
        self.starts.append(start)
        try:
            write_mark(self.state_dir, ServerMark(process.pid, boot_id(), server_id))
            self.on_start(process.pid)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._stop(process, server_id)
            raise
        try:
            async with anyio.create_task_group() as tg:
                # Shielded: a run that ends still copies the server's last lines.
                copying, copied = anyio.CancelScope(shield=True), anyio.Event()
                tg.start_soon(self._copy_output, process, copying, copied)
                try:
                    yield start
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop(process, server_id)
                        with anyio.move_on_after(OUTPUT_GRACE_S):
                            await copied.wait()
                    copying.cancel()
        finally:
            (self.state_dir / SERVER_PID).unlink(missing_ok=True)
            self.current = None
            code = process.returncode
            name = signal.Signals(-code).name if code is not None and code < 0 else None
            start.ended_at = time.monotonic()
            start.end = Exit(
                process.pid,
                None if name else code,
                name,
                self.log.tail(),
                round(time.monotonic() - start.at, 1),
            )
            self.on_exit(start.end)

    async def _copy_output(
        self, process: Process, copying: anyio.CancelScope, copied: anyio.Event
    ) -> None:
        assert process.stdout is not None
        with copying, contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            async for chunk in process.stdout:
                self.log.write(chunk)
        copied.set()

    async def _ready(self, process: Process) -> bool:
        """Whether the endpoint answered within `ready_timeout_s` while the server ran."""
        with anyio.move_on_after(self.settings.ready_timeout_s):
            async with httpx2.AsyncClient(timeout=5.0) as client:
                while process.returncode is None:
                    with contextlib.suppress(httpx2.HTTPError):
                        if (await client.get(self.models_url)).status_code == 200:
                            return True
                    with anyio.move_on_after(READY_POLL_S):
                        await process.wait()
        return False

    def stood_still(self) -> None:
        """The server stopped answering (a reply stood still past `llm.timeout_s`): all of it is
        killed, and `serve` starts it again."""
        start = self.current
        if start is not None and start.process.returncode is None:
            start.stopped_for = "was killed for standing still"
            with contextlib.suppress(ProcessLookupError):
                start.process.send_signal(launch.KILL_NOW)

    async def _stop(self, process: Process, server_id: str) -> None:
        """The launcher is asked to stop the server (SIGTERM, SIGKILL after `STOP_GRACE_S`) and
        waited for; then whatever is still in the cgroup or carries the start's id is killed
        (the launcher itself killed, by anyone: what it held was handed to init)."""
        # Our child, not yet reaped: its pid is no other process's.
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(STOP_GRACE_S + LAUNCHER_SLACK_S):
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        await self.cgroup.kill()
        await kill_marked(server_id)


def journalled(settings: Settings, journal: Journal) -> ManagedServer:
    """The run's server, each start and exit journalled; killed when the retry layer reports a
    reply that stood still (a `retry` notice marked `stood_still`)."""
    log = settings.paths.state_dir / SERVER_LOG
    starts = 0

    def started(pid: int) -> None:
        nonlocal starts
        journal.append(ServerStarted(pid=pid, log=str(log), restart=starts > 0))
        starts += 1

    def exited(end: Exit) -> None:
        journal.append(
            ServerExited(
                pid=end.pid, code=end.code, signal=end.signal, up_s=end.up_s, tail=end.tail
            )
        )

    server = ManagedServer(
        settings.server,
        settings.llm.base_url,
        settings.paths.state_dir,
        started,
        exited,
        partial(journal.notify, "warning"),
    )

    def on_record(record: Record, state: RunState) -> None:
        if (
            isinstance(record, Notice)
            and record.event == "retry"
            and record.details.get("stood_still")
        ):
            server.stood_still()

    journal.sinks.append(on_record)
    return server


async def keep_alive(
    settings: Settings,
    journal: Journal,
    tg: anyio.abc.TaskGroup,
    gave_up: Callable[[RunError | StateUnwritable], None],
) -> None:
    """With `[server] command` set: the run's server kept alive in `tg`, returning once it
    answers; `gave_up` is told if it keeps dying (the run then stops)."""
    if not settings.server.command:
        return
    program = settings.server.command[0]
    if shutil.which(program) is None:
        # Else every start would fail the same way, and the run stop only past max_restarts.
        raise SetupError(
            f"server.command: {program!r} is not a program on PATH nor an executable file; "
            "fix [server] command in the config"
        )
    ready = anyio.Event()

    async def serve() -> None:
        try:
            await journalled(settings, journal).serve(ready)
        except (RunError, StateUnwritable) as e:  # it kept dying, or its files cannot be made
            gave_up(e)

    tg.start_soon(serve)
    await ready.wait()
