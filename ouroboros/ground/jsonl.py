"""Append-only JSONL files: the one writer and the one reader of every file in the state folder.

A line is complete when it ends with a newline. A last line without one is a write a crash cut
short (or one still in progress, for a reader of a live run): readers leave it unread, and the
writer sets it aside in a side file before it appends. A bad line anywhere else is skipped and
reported with its line number; nothing is ever deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from ouroboros.ground.errors import unwritable
from ouroboros.ground.printable import BEYOND_C0

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
_JSON_ESCAPES = {code: f"\\u{code:04x}" for code in BEYOND_C0}


@contextmanager
def storage(path: Path) -> Iterator[None]:
    """Work on `path`, a file of the state folder: any error (a full disk, a read-only file
    system, a file made immutable) becomes `StateUnwritable`, one line saying what to do."""
    try:
        yield
    except OSError as e:
        raise unwritable(path, e) from None


class Parser(Protocol[T_co]):
    """Reads a line as a record (a pydantic `TypeAdapter`, or the journal's `JournalParser`)."""

    def validate_json(self, data: str | bytes, /) -> T_co: ...


@dataclass(frozen=True)
class Problem:
    path: Path
    line: int
    why: str

    def __str__(self) -> str:
        return f"{self.path.name}, line {self.line}: {self.why}; skipped (the file keeps it)"


def parse_object(raw: bytes) -> dict[str, Any] | None:
    """One line as a JSON object; None when it is not one."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def offset_of_last(path: Path, lines: int, block: int = 1 << 16) -> int:
    """The byte offset where the last `lines` complete lines of the file begin (0 when it has
    no more): read from the end, so a long file costs what is shown, not its length. A last
    line without its newline is not complete and is not counted."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return 0
    with f:
        position = f.seek(0, 2)
        newlines = 0  # the first one found ends the last complete line
        while position > 0:
            start = max(0, position - block)
            f.seek(start)
            chunk = f.read(position - start)
            index = len(chunk)
            while (index := chunk.rfind(b"\n", 0, index)) != -1:
                newlines += 1
                if newlines == lines + 1:
                    return start + index + 1
            position = start
        return 0


@dataclass
class JsonlReader:
    """The complete lines of a file from a byte offset on, parsed (by jsonlines) as they are
    asked for; each call goes on where the last stopped (a growing file is followed this way)."""

    path: Path
    offset: int = 0
    line: int = 0
    """Lines before `offset`."""
    problems: list[Problem] = field(default_factory=list)
    torn: bytes = b""
    """What follows the last newline: a line being written, or cut short by a crash."""
    raw: bytes = b""
    """The line the last value came from."""

    def _complete_lines(self) -> Iterator[bytes]:
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            return
        with f:
            f.seek(self.offset)
            self.torn = b""
            for raw in f:
                if not raw.endswith(b"\n"):
                    self.torn = raw
                    return
                self.offset += len(raw)
                self.line += 1
                self.raw = raw
                yield raw

    def _parsed(self, loads: Callable[[str | bytes], Any], kind: type | None) -> Iterator[Any]:
        # Here, not at the top: `status` imports this module and reads no JSONL file.
        import jsonlines

        first = self.line + 1
        reader = jsonlines.Reader(self._complete_lines(), loads=loads)
        while True:
            try:
                yield reader.read(type=kind, skip_empty=True)
            except EOFError:
                return
            except jsonlines.InvalidLineError as e:
                why = _why(e.__cause__)
                self.problems.append(Problem(self.path, first + e.lineno - 1, why))

    def objects(self) -> Iterator[dict[str, Any]]:
        """Each line that is a JSON object."""
        yield from self._parsed(json.loads, dict)

    def records(self, adapter: Parser[T]) -> Iterator[T]:
        """Each line that is a valid record of `adapter`'s type."""
        yield from self._parsed(adapter.validate_json, None)


def _why(cause: BaseException | None) -> str:
    """Why a line was not read: what the record's parser refused in it, or that it is no
    JSON object."""
    if "pydantic" not in sys.modules:  # only a record's parser says more, and it loaded it
        return "not a JSON object"
    # Here, not at the top: a reader of plain JSON lines (`tail`) never loads pydantic.
    from pydantic import ValidationError

    if isinstance(cause, ValidationError):
        error = cause.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"not a valid record ({where}: {error['msg']})"
    return "not a JSON object"


def read_objects(path: Path) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Every JSON object of a file, and the lines that were not one."""
    reader = JsonlReader(path)
    return list(reader.objects()), reader.problems


def set_aside_torn_tail(path: Path, reach: int = 1 << 20) -> Path | None:
    """Before appending: a last line a crash cut short goes to a side file, so new records
    start on a line of their own (cheap: only the file's end is read)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    with path.open("rb+") as f:
        f.seek(max(0, size - reach))
        tail = f.read()
        if not tail or tail.endswith(b"\n"):
            return None
        cut = tail.rfind(b"\n") + 1
        if cut == 0 and size > reach:
            f.write(b"\n")  # a line longer than the reach: end it rather than guess
            return None
        aside = path.with_name(f"{path.name}.torn-{int(time.time() * 1000)}")
        aside.write_bytes(tail[cut:])
        f.truncate(size - len(tail) + cut)
        os.fsync(f.fileno())
    return aside


def last_line(path: Path, reach: int = 1 << 16) -> dict[str, Any] | None:
    """The last complete line of a file as a JSON object, read from its end."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - reach))
            tail = f.read()
    except FileNotFoundError:
        return None
    for raw in reversed(tail[: tail.rfind(b"\n") + 1].splitlines()):
        if (value := parse_object(raw)) is not None:
            return value
    return None


class JsonlWriter:
    """Appends one line per record; `durable` files are fsync'ed after every line."""

    def __init__(self, path: Path, durable: bool = False):
        with storage(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            self.torn_aside = set_aside_torn_tail(path)
            self._file: IO[bytes] = path.open("ab")
        self.path = path
        self.durable = durable
        self._failed: OSError | None = None

    @property
    def size(self) -> int:
        return self._file.tell()

    def write(self, line: str) -> bytes:
        """Write one line of JSON (without its newline) and return its bytes as written: with
        what a terminal would act on escaped (`\\u009b`, the same data), so that the file is
        safe to `cat` or `tail -f`. When it cannot be written, `StateUnwritable` (what was
        written of the line is a torn last line, set aside on the next start), and so for every
        later line: one written after a torn one would join it, and the file's line would be
        neither."""
        data = line.translate(_JSON_ESCAPES).encode() + b"\n"
        with storage(self.path):
            if self._failed is not None:
                raise self._failed
            try:
                self._file.write(data)
                self._file.flush()
                if self.durable:
                    os.fsync(self._file.fileno())
            except OSError as e:
                self._failed = e
                raise
        return data

    def append(self, record: dict[str, Any]) -> None:
        self.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")))

    def close(self) -> None:
        # A full disk may refuse the last buffered bytes: the torn line is set aside next time.
        with contextlib.suppress(OSError):
            self._file.close()
