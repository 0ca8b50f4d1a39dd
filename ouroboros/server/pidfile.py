"""`server.pid`: what names one start of the run's server, and how the next start stops what a
run killed with -9 left of it.

Each start of the server gets an id (`SERVER_ID` in the launcher's environment, which whatever
the server starts inherits), written in `server.pid` with the launcher's pid and the machine's
boot id. The next start signals only processes that carry that id, on the same boot, each
pinned before it is checked (a pidfd): never a process or a group because a pid says so. A pid
of 0 or below, a pid another process took, a group whose leader is gone, a file from before a
reboot: nothing in them carries the id, and nothing is signalled.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from ouroboros.ground.jsonl import storage
from ouroboros.ground.state_folder import SERVER_PID
from ouroboros.operator.inbox import NotAMessage, read_regular, set_aside
from ouroboros.server.files import own_file
from ouroboros.server.launch import ended, pids, signal_if, started_at

SERVER_ID = "OUROBOROS_SERVER_ID"
"""The variable that marks every process of one start of the server."""
PID_BYTES = 128
"""`server.pid`'s one line, well within."""
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
LINE = re.compile(r"([1-9][0-9]{0,9}) ([0-9a-f-]{36}|unknown) ([0-9a-f]{32})\n")
ROUNDS = 20
"""Sweeps for marked processes at most: each finds what those killed before forked."""
GONE_WITHIN_S = 10.0
"""How long processes killed may take to be gone (a GPU's memory freed) before a start goes
on regardless."""
GONE_POLL_S = 0.02


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return "unknown"


@dataclass(frozen=True)
class ServerMark:
    """One start of the server, as `server.pid` names it."""

    pid: int
    """The launcher's (`launch.py`): what `status` and the journal name."""
    boot: str
    server_id: str

    def line(self) -> str:
        return f"{self.pid} {self.boot} {self.server_id}\n"

    @classmethod
    def read(cls, text: str) -> ServerMark | None:
        """The mark `text` holds, if it is a line `line` wrote."""
        found = LINE.fullmatch(text)
        return cls(int(found[1]), found[2], found[3]) if found else None


def write_mark(state_dir: Path, mark: ServerMark) -> None:
    handle = own_file(state_dir / SERVER_PID, os.O_WRONLY | os.O_TRUNC)
    with storage(state_dir / SERVER_PID):
        try:
            os.write(handle, mark.line().encode())
        finally:
            os.close(handle)


def carries(server_id: str) -> Callable[[int], bool]:
    """Whether a process's environment holds this start's id (one of another user's is not
    readable, and not ours)."""
    entry = f"{SERVER_ID}={server_id}".encode()

    def check(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return entry in f.read().split(b"\0")
        except OSError:
            return False

    return check


async def kill_marked(server_id: str) -> int:
    """SIGKILL every process that carries `server_id`, and wait until they are gone (a port
    one of them held is free); how many there were."""
    marked = carries(server_id)
    killed: dict[int, str | None] = {}
    for _ in range(ROUNDS):
        found = [pid for pid in pids() if pid not in killed and pid != os.getpid() and marked(pid)]
        if not found:
            break
        for pid in found:
            started = started_at(pid)
            if signal_if(pid, signal.SIGKILL, marked):
                killed[pid] = started
    with anyio.move_on_after(GONE_WITHIN_S):
        while not all(ended(pid, started) for pid, started in killed.items()):
            await anyio.sleep(GONE_POLL_S)
    return len(killed)


async def kill_orphan(state_dir: Path) -> str | None:
    """Kill what is left of the server a killed run started (named by `server.pid`); a line to
    journal as a warning, if there is one to say."""
    path = state_dir / SERVER_PID
    try:
        data = read_regular(path, PID_BYTES)
    except FileNotFoundError:
        return None
    except NotAMessage as e:  # a link, a FIFO, a folder: not the run's, and nothing to kill
        with storage(path):
            aside = set_aside(path)
        return f"{path} was {e} (set aside as {aside.name}): nothing was signalled"
    with storage(path):
        path.unlink(missing_ok=True)
    text = data.decode("utf-8", "replace")
    mark = ServerMark.read(text)
    if mark is None:
        return (
            f"{path} held {text.strip()[:60]!r}, which names no server this "
            "harness started (a pid, the boot id and the server's id): nothing was signalled; "
            "a model server an earlier version left may still run"
        )
    if mark.boot != boot_id():
        return None  # the machine started again since: nothing of that server runs
    killed = await kill_marked(mark.server_id)
    if not killed:
        return None
    return f"killed the model server a killed run left (pid {mark.pid}; {killed} process(es))"
