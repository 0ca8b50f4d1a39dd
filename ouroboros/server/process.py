"""The model server as a child of the run (`[server] command`): started in its own process
group before the first call, its output in a size-capped log, ready once the OpenAI endpoint
answers, started again when it exits or stalls, and stopped with the run.

A run killed with -9 cannot stop it: the child is told by the kernel to die with the run
(`PR_SET_PDEATHSIG`), and what that misses (a child the command itself started) is found by the
next start from `server.pid` and its whole group killed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import anyio
import httpx2
from anyio.abc import Process

from ouroboros.ground.config import ServerSettings, Settings
from ouroboros.ground.errors import RunError, StateUnwritable
from ouroboros.ground.jsonl import storage
from ouroboros.ground.state_folder import SERVER_LOG, SERVER_PID
from ouroboros.operator.inbox import NotAMessage, read_regular, set_aside
from ouroboros.server.records import ServerExited, ServerStarted
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal
from ouroboros.state.records import Notice, Record

TAIL_LINES = 5
STOP_GRACE_S = 10.0
READY_POLL_S = 0.2
PID_BYTES = 64
"""`server.pid`: a pid and a start time, well within."""
OWN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | os.O_CREAT
"""How the run opens its own files of the state folder: never through a link another party
planted, never waiting on a FIFO."""

# The child asks the kernel to kill it when its parent dies, then becomes the command (the
# request survives the exec): a run killed with -9 leaves no server behind.
_LAUNCH = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)


@dataclass(frozen=True)
class Exit:
    """How a server process ended."""

    pid: int
    code: int | None
    signal: str | None
    tail: str
    """The last lines of its log."""
    up_s: float

    def text(self) -> str:
        how = f"killed by {self.signal}" if self.signal else f"exit status {self.code}"
        return f"the model server (pid {self.pid}) stopped: {how}"


class ServerGaveUp(RunError):
    """The server kept dying: the run stops with one line naming its log."""


def _started_at(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22): with
    the pid, it names one process, never a later one that reused the pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def kill_orphan(state_dir: Path) -> int | None:
    """Kill the group of a server a killed run left (named by `server.pid`); its pid, if one
    was still there."""
    path = state_dir / SERVER_PID
    try:
        pid_text, started = read_regular(path, PID_BYTES).decode().split()
        pid = int(pid_text)
    except NotAMessage:  # a link, a FIFO, a folder: not the run's, and nothing to kill
        with storage(path):
            set_aside(path)
        return None
    except (OSError, ValueError):
        return None
    path.unlink(missing_ok=True)
    if _started_at(pid) not in (started, None):
        return None  # the pid is another process's now
    # The leader, or, once the kernel killed it with the run, what it started: still in its
    # group, whose id no new process is given while one of them lives.
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return None
    return pid


def own_file(path: Path, flags: int) -> int:
    """`path` opened with `flags | OWN` as a regular file; whatever else stands there (a link,
    a FIFO, a folder) is set aside first (`<name>.rejected`), never followed or waited on."""
    with storage(path):
        try:
            handle: int | None = os.open(path, flags | OWN, 0o600)
        except OSError:  # a link (ELOOP), a FIFO no one reads (ENXIO), a folder (EISDIR)
            handle = None
        if handle is not None:
            if stat.S_ISREG(os.fstat(handle).st_mode):
                return handle
            os.close(handle)
        if os.path.lexists(path):
            set_aside(path)
        return os.open(path, flags | OWN | os.O_EXCL, 0o600)


def write_pid(state_dir: Path, pid: int) -> None:
    handle = own_file(state_dir / SERVER_PID, os.O_WRONLY | os.O_TRUNC)
    with storage(state_dir / SERVER_PID):
        try:
            os.write(handle, f"{pid} {_started_at(pid)}\n".encode())
        finally:
            os.close(handle)


class CappedLog:
    """The server's output: when the log reaches `max_bytes` it is moved to `server.log.1`
    (replacing the one before) and a new one begins. Its tail is read from the run's own
    handle, never from whatever stands at the path by then."""

    def __init__(self, path: Path, max_bytes: int):
        self.path, self.max_bytes = path, max_bytes
        self._file = self._open()

    def _open(self) -> BinaryIO:
        return os.fdopen(own_file(self.path, os.O_RDWR | os.O_APPEND), "a+b")

    def write(self, data: bytes) -> None:
        if self._file.tell() + len(data) > self.max_bytes:
            self._file.close()
            before = self.path.with_name(self.path.name + ".1")
            if before.is_dir() and not before.is_symlink():
                set_aside(before)  # a folder planted there: a rename onto it would fail
            self.path.replace(before)  # a link there is replaced, not followed
            self._file = self._open()
        self._file.write(data)
        self._file.flush()

    def tail(self, lines: int = TAIL_LINES) -> str:
        try:
            handle = self._file.fileno()
            size = os.fstat(handle).st_size
            text = os.pread(handle, 8192, max(0, size - 8192)).decode("utf-8", "replace")
        except (OSError, ValueError):  # ValueError: closed
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        self._file.close()


class ManagedServer:
    """Keeps the server of `settings` running for as long as `serve` runs; `on_start(pid)` and
    `on_exit(exit)` are told of each start and exit (the run journals them)."""

    def __init__(
        self,
        settings: ServerSettings,
        base_url: str,
        state_dir: Path,
        on_start: Callable[[int], None],
        on_exit: Callable[[Exit], None],
    ):
        self.settings, self.state_dir = settings, state_dir
        self.models_url = base_url.rstrip("/") + "/models"
        self.on_start, self.on_exit = on_start, on_exit
        self.log = CappedLog(state_dir / SERVER_LOG, settings.log_max_bytes)
        self.process: Process | None = None
        self.exits: list[float] = []

    async def serve(self, ready: anyio.Event) -> None:
        """Start the server, set `ready` once it first answers, start it again whenever it
        exits; raises `ServerGaveUp` once it exits more than `max_restarts` times within
        `restart_window_s` (a start that never answers is an exit), or more than
        `max_restarts` starts in a row never answer."""
        unanswered = 0
        try:
            while True:
                async with self._running() as process:
                    answered = await self._ready(process)
                    if answered:
                        ready.set()
                        await process.wait()
                self.exits.append(time.monotonic())
                unanswered = 0 if answered else unanswered + 1
                self._give_up_if_dying("keeps stopping" if answered else "never answered")
                # Starts that each wait `ready_timeout_s` may be spread wider than the window.
                if unanswered > self.settings.max_restarts:
                    raise ServerGaveUp(
                        f"the model server never answered: {unanswered} starts in a row, each "
                        f"waited server.ready_timeout_s ({self.settings.ready_timeout_s:g} s) "
                        f"for {self.models_url}; its output is in {self.log.path}"
                    )
        finally:
            self.log.close()

    def _give_up_if_dying(self, why: str) -> None:
        window = self.settings.restart_window_s
        recent = [t for t in self.exits if t >= time.monotonic() - window]
        if len(recent) > self.settings.max_restarts:
            raise ServerGaveUp(
                f"the model server {why}: {len(recent)} exits within {window:g} s "
                f"(server.max_restarts = {self.settings.max_restarts}); its output is in "
                f"{self.log.path}"
            )

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[Process]:
        kill_orphan(self.state_dir)
        command = [sys.executable, "-c", _LAUNCH, *self.settings.command]
        process = await anyio.open_process(
            command,
            stdin=None,
            stdout=-1,
            stderr=-2,  # subprocess.STDOUT: one log, in the order written
            start_new_session=True,
        )
        self.process = process
        started = time.monotonic()
        try:
            write_pid(self.state_dir, process.pid)
            self.on_start(process.pid)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._stop(process)
            raise
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._copy_output, process)
                try:
                    yield process
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop(process)
        finally:
            (self.state_dir / SERVER_PID).unlink(missing_ok=True)
            self.process = None
            code = process.returncode
            name = signal.Signals(-code).name if code is not None and code < 0 else None
            self.on_exit(
                Exit(
                    process.pid,
                    None if name else code,
                    name,
                    self.log.tail(),
                    round(time.monotonic() - started, 1),
                )
            )

    async def _copy_output(self, process: Process) -> None:
        assert process.stdout is not None
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            async for chunk in process.stdout:
                self.log.write(chunk)

    async def _ready(self, process: Process) -> bool:
        """Whether the endpoint answered within `ready_timeout_s` while the process lived."""
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
        """The server stopped answering (a reply stood still past `llm.timeout_s`): its group
        is killed, and `serve` starts it again."""
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    async def _stop(self, process: Process) -> None:
        """SIGTERM to the group, SIGKILL after `STOP_GRACE_S`; also the group's other members
        once the leader is gone."""
        for signum, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signum)
            if grace is None:
                await process.wait()
                return
            with anyio.move_on_after(grace):
                await process.wait()
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                return


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
        settings.server, settings.llm.base_url, settings.paths.state_dir, started, exited
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
        raise RunError(
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
