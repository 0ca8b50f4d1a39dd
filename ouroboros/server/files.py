"""The server's files in the state folder (`server.log`, `server.pid`): opened through no link,
never waiting on a FIFO; anything else standing there is set aside as `<name>.rejected`."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from ouroboros.ground.jsonl import storage
from ouroboros.operator.inbox import set_aside

TAIL_LINES = 5
OWN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | os.O_CREAT
"""How the run opens its own files of the state folder: never through a link another party
planted, never waiting on a FIFO."""


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
