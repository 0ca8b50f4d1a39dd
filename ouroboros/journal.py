"""Append-only JSONL files: the durable journal the run resumes from, and the logs people tail."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import jsonlines

RECORD_VERSION = 1
"""Written in every line; bumped only if a field is renamed or removed (fields may be added)."""


class JournalCorrupt(Exception):
    """A line in the middle of a JSONL file does not parse: refuse rather than guess."""


class StorageFull(Exception):
    """The disk of a state file is full: the run stops, whole, until there is room again."""

    def __init__(self, path: Path):
        free = shutil.disk_usage(path.parent).free if path.parent.exists() else 0
        super().__init__(
            f"no space left to write {path} ({free:,} bytes free on its disk): free at least "
            f"{NEEDED_FREE_BYTES:,} bytes there, then run the same command again; nothing was "
            "lost"
        )


NEEDED_FREE_BYTES = 10 * 1024 * 1024
"""What a run asks to be freed: room for a few thousand more records."""
_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextmanager
def storage(path: Path) -> Iterator[None]:
    """Turn a full disk under `path` into `StorageFull`; other errors stay what they are."""
    try:
        yield
    except OSError as e:
        if e.errno in _FULL:
            raise StorageFull(path) from None
        raise


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class ReadResult:
    records: list[dict[str, Any]]
    torn_line: bytes | None
    """A last line cut short by a crash, dropped from `records`."""
    good_bytes: int
    """Where the last whole record ends."""


def read_jsonl(path: Path) -> ReadResult:
    """All records; a torn last line is tolerated, a bad line anywhere else is an error."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ReadResult([], None, 0)
    lines = data.split(b"\n")
    torn = None
    if lines[-1] == b"":
        lines.pop()
    else:
        torn = lines.pop()  # no newline at the end: the write never finished
    records: list[dict[str, Any]] = []
    reader = jsonlines.Reader(lines)
    try:
        for record in reader.iter(type=dict):
            records.append(record)
    except jsonlines.InvalidLineError as e:
        if e.lineno == len(lines) and torn is None:
            torn = lines[-1]
        else:
            raise JournalCorrupt(
                f"{path}, line {e.lineno}: not a valid JSON record ({e}); the file was left "
                "untouched: move it aside or repair that line, then run again"
            ) from None
    good_bytes = sum(len(line) + 1 for line in lines[: len(records)])
    return ReadResult(records, torn, good_bytes)


def repair_torn_tail(path: Path, read: ReadResult) -> Path | None:
    """Move a torn last line aside (never lost) so appends continue on a clean line."""
    if read.torn_line is None:
        return None
    aside = path.with_name(f"{path.name}.torn-{int(time.time() * 1000)}")
    aside.write_bytes(read.torn_line)
    with path.open("rb+") as f:
        f.truncate(read.good_bytes)
        os.fsync(f.fileno())
    return aside


def set_aside_torn_tail(path: Path, window: int = 1 << 20) -> Path | None:
    """Before appending: a last line a crash cut short goes to a side file, so new records
    start on a line of their own (cheap: only the file's end is read)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    with path.open("rb+") as f:
        f.seek(max(0, size - window))
        tail = f.read()
        if not tail or tail.endswith(b"\n"):
            return None
        cut = tail.rfind(b"\n") + 1
        if cut == 0 and size > window:
            f.write(b"\n")  # a line longer than the window: end it rather than guess
            return None
        aside = path.with_name(f"{path.name}.torn-{int(time.time() * 1000)}")
        aside.write_bytes(tail[cut:])
        f.truncate(size - len(tail) + cut)
    return aside


class JsonlWriter:
    """Appends one JSON object per line; `durable` files are fsync'ed after every record."""

    def __init__(self, path: Path, durable: bool = False):
        with storage(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            set_aside_torn_tail(path)
        self.path = path
        self.durable = durable
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Write one line; on a full disk, `StorageFull` (what was written of the line is a
        torn last line, set aside on the next start)."""
        record = {"v": RECORD_VERSION, "ts": now_iso(), "kind": kind, **fields}
        with storage(self.path):
            self._file.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
            self._file.flush()
            if self.durable:
                os.fsync(self._file.fileno())
        return record

    def close(self) -> None:
        # A full disk may refuse the last buffered bytes: the torn line is set aside next time.
        with contextlib.suppress(OSError):
            self._file.close()
