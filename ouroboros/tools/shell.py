"""`shell_exec`: a bash command in the workspace, confined where the kernel allows, never waited
for longer than its timeout, and never waited for after it exited.

A command that leaves a background job (`server &`) returns as soon as bash exits, with what it
printed; the job goes on in the command's process group until the session ends, its further
output appended to a log file in the workspace, which the result names.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

import anyio
from pydantic import Field

from ouroboros.tools import safefs
from ouroboros.tools.blocklist import Blocklist
from ouroboros.tools.child_exit import failed_step
from ouroboros.tools.environment import remove_scratch
from ouroboros.tools.processes import Processes
from ouroboros.tools.tool import Output, Tool, ToolArgs, ToolContext, ToolFailed
from ouroboros.tools.workspace import PathRefused, Workspace

SHELL_CAPTURE_LIMIT = 32 * 1024 * 1024
"""Bytes of command output held in memory; the rest is counted, not stored."""
EXIT_POLL_S = 0.05
"""How often a command that prints nothing is checked for having exited."""
BACKGROUND_LOG_LIMIT = 10 * 1024 * 1024
"""Bytes of a background job's later output kept in its log file; the rest is dropped."""
KILL_WAIT_S = 0.5
"""How long a killed command is waited for before the harness goes on without it."""
MAX_COMMAND_BYTES = 128 * 1024 - 1
"""The longest command bash can be given: Linux refuses a longer single argument to exec
(MAX_ARG_STRLEN, 32 pages, with its terminating NUL)."""


class ShellExecArgs(ToolArgs):
    """Run a bash command in the workspace: its exit code and output."""

    command: str
    timeout_s: float = Field(0, ge=0)
    """0: `session.shell_timeout_s`."""


class ShellExec(Tool):
    """Commands as `processes` starts them (confined, where the harness was given a sandbox),
    in `env`; `scratch`, their TMPDIR, is removed with the tool."""

    name, args = "shell_exec", ShellExecArgs

    def __init__(
        self,
        timeout_s: float,
        processes: Processes | None = None,
        env: Mapping[str, str] | None = None,
        blocklist: Blocklist | None = None,
        scratch: Path | None = None,
    ):
        self.timeout_s, self.env, self.scratch = timeout_s, dict(env or os.environ), scratch
        self.processes = processes or Processes(None, use_cgroup=False)
        self.blocklist = blocklist

    async def run(self, args: ShellExecArgs, context: ToolContext) -> Output:
        check_length(args.command)
        if self.blocklist is None:
            self.blocklist = Blocklist(workspace=str(context.workspace.root))
        blocked = await anyio.to_thread.run_sync(self.blocklist.reason, args.command)
        if blocked:
            raise ToolFailed(f"refused: this command is blocked ({blocked})", blocked)
        timeout = min(args.timeout_s or self.timeout_s, self.timeout_s)
        ran = await run_command(context.workspace, args.command, timeout, self.processes, self.env)
        output, total, code, note = ran
        text = output.decode(errors="replace")
        if total > len(output):
            text += f"\n[{total - len(output):,} more bytes not captured]"
        if code is None:
            return Output(f"{text}\n[timed out after {timeout:g} s; process group killed]", -9)
        step = failed_step(code, output)
        if step is not None:
            raise ToolFailed(f"the command never ran: {step} (exit code {code})")
        return Output(f"exit code {code}\n{text}{note}", code)

    def end_session(self) -> None:
        """Background jobs the session's commands left are killed."""
        self.processes.end_session()

    def close(self) -> None:
        self.processes.close()
        if self.scratch is not None:
            remove_scratch(self.scratch)


def check_length(command: str) -> None:
    """Refuse at once a command exec would refuse anyway, before any work on it."""
    size = len(command.encode(errors="replace"))
    if size > MAX_COMMAND_BYTES:
        raise ToolFailed(
            f"the command is {size:,} bytes; bash takes at most {MAX_COMMAND_BYTES:,} in one "
            "command: write the script to a file with file_write and run it with bash FILE"
        )


def _read_available(fd: int) -> tuple[bytes, bool]:
    """What the pipe holds now, and whether it reached its end."""
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return b"".join(chunks), False
        if not data:
            return b"".join(chunks), True
        chunks.append(data)


async def run_command(
    ws: Workspace, command: str, timeout: float, processes: Processes, env: Mapping[str, str]
) -> tuple[bytes, int, int | None, str]:
    """(captured output, total bytes, exit code or None if it timed out, a note on what goes
    on after it)."""
    process = processes.start(["bash", "-c", command], ws.root, env)
    assert process.stdout is not None
    fd = process.stdout.fileno()
    os.set_blocking(fd, False)
    captured, total, ended = bytearray(), 0, False

    def take() -> None:
        nonlocal total, ended
        data, ended = _read_available(fd)
        total += len(data)
        captured.extend(data[: max(0, SHELL_CAPTURE_LIMIT - len(captured))])

    try:
        with anyio.move_on_after(timeout) as deadline:
            while process.poll() is None:
                with anyio.move_on_after(EXIT_POLL_S):
                    await anyio.wait_readable(fd)
                take()
                if ended:  # the pipe closed: bash is exiting
                    await _exited(process)
            take()  # what it printed just before it exited
    finally:
        if process.returncode is None:  # timed out, or the harness is stopping
            processes.kill(process.pid)
            # Bounded: a process stuck in the kernel (a hung mount) must not keep the harness
            # from stopping; the session's end and the watchdog reap what is left.
            with anyio.CancelScope(shield=True), anyio.move_on_after(KILL_WAIT_S):
                while process.poll() is None:
                    await anyio.sleep(0.005)
    if deadline.cancelled_caught or ended:
        process.stdout.close()
        processes.finished(process)
        code = None if deadline.cancelled_caught else process.returncode
        return bytes(captured), total, code, ""
    return bytes(captured), total, process.returncode, _keep_draining(ws, process, fd)


async def _exited(process: subprocess.Popen[bytes]) -> None:
    """Wait for the process to exit: on its pidfd (Linux 5.3+), which becomes readable the
    moment it does, else by polling."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # another kernel, or no pidfd
        while process.poll() is None:
            await anyio.sleep(0.005)
        return
    try:
        while process.poll() is None:
            with anyio.move_on_after(EXIT_POLL_S):
                await anyio.wait_readable(pidfd)
    finally:
        os.close(pidfd)


def _keep_draining(ws: Workspace, process: subprocess.Popen[bytes], fd: int) -> str:
    """Bash exited, something it started still holds the output: keep reading it into a log
    (a job whose writes went nowhere would die of SIGPIPE, or block on a full pipe)."""
    log, shown = _open_log(ws, process.pid)
    assert process.stdout is not None
    stream = process.stdout

    def drain() -> None:
        os.set_blocking(fd, True)
        kept = 0
        with contextlib.suppress(OSError), stream, contextlib.ExitStack() as closing:
            out = closing.enter_context(open(log, "ab")) if log is not None else None
            while data := os.read(fd, 65536):
                if out is not None and kept < BACKGROUND_LOG_LIMIT:
                    out.write(data[: BACKGROUND_LOG_LIMIT - kept])
                    out.flush()
                    kept += len(data)

    threading.Thread(target=drain, name=f"background-{process.pid}", daemon=True).start()
    where = f"goes to {shown}" if log is not None else f"is dropped ({shown})"
    return (
        f"\n[bash exited; processes it started in the background still run until this session "
        f"ends; their further output {where}]"
    )


def _open_log(ws: Workspace, pid: int) -> tuple[int | None, str]:
    """A new log file for a background job (its name, or why there is none). A name already
    taken, by a link or an older file, is never opened: another is chosen."""
    why = ""
    for name in (f"background-{pid}.log", f"background-{pid}-{secrets.token_hex(4)}.log"):
        where = f".outputs/{name}"
        try:
            return safefs.create_new(ws.locate(where)), where
        except FileExistsError:
            why = f"{where} exists"
        except OSError as e:
            return None, f"no log: {where}: {e.strerror}"
        except PathRefused as e:
            return None, f"no log: {e}"
    return None, f"no log: {why}"
