"""A stdio MCP server as the SDK's transport, started the way shell commands are (`Processes`:
confined between fork and exec, its own process group, killed with the run and the harness),
and read with a cap: a line longer than `limit` bytes is never held whole, nor is a line that
is not JSON-RPC passed on. Either is the server's fault (`Fault`): the connection closes at once,
so the call waiting on it fails then, not at its timeout."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from ouroboros.tools.child_exit import failed_step
from ouroboros.tools.processes import Processes

CHUNK = 65536
STDERR_KEPT = 2048
"""Bytes of the server's newest error output kept, to say why it failed."""
EXIT_WAIT_S = 1.0
"""How long a server whose input was closed may take to exit before it is killed."""
KILL_WAIT_S = 0.5


@dataclass
class Fault:
    """What went wrong on a connection, as one line (None while nothing has)."""

    reason: str | None = None
    stderr: bytes = b""

    def note(self, reason: str) -> None:
        self.reason = self.reason or reason

    def last_error_line(self) -> str:
        lines = self.stderr.decode(errors="replace").strip().splitlines()
        return lines[-1][:200] if lines else ""


@contextlib.asynccontextmanager
async def confined_stdio(
    command: list[str],
    cwd: Path,
    env: Mapping[str, str],
    processes: Processes,
    limit: int,
    fault: Fault,
) -> AsyncIterator[TransportStreams]:
    process = processes.start(command, cwd, env, talks=True)
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    pipes = process.stdin.fileno(), process.stdout.fileno(), process.stderr.fileno()
    for fd in pipes:
        os.set_blocking(fd, False)
    into_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def read() -> None:
        async with into_session:
            await _read_messages(pipes[1], into_session, limit, fault)
            if fault.reason is None:  # its output ended: it is exiting, say how once it has
                with anyio.move_on_after(EXIT_WAIT_S):
                    while process.poll() is None:
                        await anyio.sleep(0.01)
                fault.note(_exited(process, fault.stderr))

    async def write() -> None:
        async with from_session:
            async for message in from_session:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                if not await _write_all(pipes[0], (data + "\n").encode()):
                    fault.note("stopped reading its input")
                    await into_session.aclose()
                    return

    async def keep_errors() -> None:
        while True:
            await anyio.wait_readable(pipes[2])
            data = _read(pipes[2])
            if not data:
                return
            fault.stderr = (fault.stderr + data)[-STDERR_KEPT:]

    try:
        async with anyio.create_task_group() as tg:
            for task in (read, write, keep_errors):
                tg.start_soon(task)
            try:
                yield read_stream, write_stream
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process, processes)


def _read(fd: int) -> bytes | None:
    """What the pipe holds now (b"" at its end, None when nothing is there yet)."""
    try:
        return os.read(fd, CHUNK)
    except BlockingIOError:
        return None


async def _read_messages(
    fd: int, into: MemoryObjectSendStream[SessionMessage | Exception], limit: int, fault: Fault
) -> None:
    pending = bytearray()
    while True:
        await anyio.wait_readable(fd)
        data = _read(fd)
        if data is None:
            continue
        if not data:
            return
        pending += data
        while (end := pending.find(b"\n")) >= 0:
            line = bytes(pending[:end])
            del pending[: end + 1]
            if not line.strip():
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValueError:
                shown = line[:80].decode(errors="replace")
                fault.note(f"sent a line that is not JSON-RPC: {shown!r}")
                return
            await into.send(SessionMessage(message))
        if len(pending) > limit:
            fault.note(f"sent a message over {limit >> 20} MB (the most read of one)")
            return


async def _write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    while view:
        await anyio.wait_writable(fd)
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue
        except OSError:
            return False
    return True


def _exited(process: subprocess.Popen[bytes], stderr: bytes) -> str:
    code = process.poll()
    if code is None:
        return "closed its output"
    step = failed_step(code, stderr)
    return f"never ran: {step} (exit code {code})" if step else f"exited with code {code}"


async def _stop(process: subprocess.Popen[bytes], processes: Processes) -> None:
    """Its input closed (a server's cue to exit), then killed with its group if it has not."""
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    with anyio.move_on_after(EXIT_WAIT_S):
        while process.poll() is None:
            await anyio.sleep(0.01)
    processes.kill(process.pid)
    with anyio.move_on_after(KILL_WAIT_S):
        while process.poll() is None:
            await anyio.sleep(0.01)
    processes.finished(process)
