"""The state folder: one supervisor at a time (an flock), and an old run moved aside."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from ouroboros.ground.errors import RunError
from ouroboros.ground.jsonl import storage
from ouroboros.ground.state_folder import JOURNAL, LOCK, USAGE
from ouroboros.state.records import JOURNAL_RECORD, RunStart
from ouroboros.state.snapshot import journal_size_then, snapshot_path

LOCK_PATIENCE_S = 1.0
"""`status` takes the lock for an instant to see whether a run holds it: a run starting in that
instant waits this long for it rather than taking `status` for another supervisor."""


def _take(handle: IO[str]) -> bool:
    deadline = time.monotonic() + LOCK_PATIENCE_S
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


@contextmanager
def state_lock(state_dir: Path) -> Iterator[str | None]:
    """Holds the state folder, before any file of the run is opened; yields the pid of a dead
    owner whose lock it took over (None: there was none), for the run to journal. flock is
    released by the kernel when the owner dies, so only a live owner blocks us."""
    path = state_dir / LOCK
    with storage(path):
        state_dir.mkdir(parents=True, exist_ok=True)
        handle = path.open("a+")
    if not _take(handle):
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        handle.close()
        raise RunError(
            f"another supervisor (pid {owner}) is running on {state_dir}; stop it first"
        ) from None
    handle.seek(0)
    previous = handle.read().strip()
    with storage(path):
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
    try:
        yield previous or None
    finally:
        # A lock made immutable meanwhile keeps its pid: the next run takes it over as a dead
        # owner's, or says in one line why it cannot.
        with contextlib.suppress(OSError):
            handle.seek(0)
            handle.truncate()
        handle.close()


def started_mark(state_dir: Path) -> Path:
    """Next to the state folder (out of the agent's reach as that is): a run began here."""
    return state_dir.with_name(f"{state_dir.name}.run")


def mark_started(state_dir: Path) -> None:
    with storage(started_mark(state_dir)):
        started_mark(state_dir).write_text(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")


FIRST_LINE_BYTES = 1 << 20
"""A run start record is a few hundred bytes: a first line longer than this is not one."""
AFRESH = "restore it to resume, or start a new run with `run --fresh` (nothing is deleted)"


def _first_line(journal: Path) -> tuple[bytes | None, bool]:
    """The journal's first line after what a first start may journal before its run start (a
    wait for the server, a warning, the error it stopped at), and whether the file ends with
    it; None: no journal, or none but those."""
    try:
        with journal.open("rb") as f:
            while line := f.readline(FIRST_LINE_BYTES):
                if not _before_a_start(line):
                    return line, f.tell() == os.fstat(f.fileno()).st_size
            return None, True
    except FileNotFoundError:
        return None, True


def _before_a_start(line: bytes) -> bool:
    try:
        record = JOURNAL_RECORD.validate_json(line) if line.endswith(b"\n") else None
    except ValidationError:
        return False
    # The command's limits, then what the wiring writes (notices, the MCP servers' tools), come
    # before the run start.
    return record is not None and record.before_run_start


def _is_run_start(line: bytes) -> bool:
    if not line.endswith(b"\n"):
        return False
    try:
        return isinstance(JOURNAL_RECORD.validate_json(line), RunStart)
    except ValidationError:
        return False


def refuse_lost_journal(state_dir: Path) -> None:
    """Refuse, in one line, to start over where a run's journal was lost, emptied or replaced:
    every run's journal begins with its run start, and a run that began left its mark beside
    the state folder. Only a first start, in a folder with no journal yet, goes on."""
    journal = state_dir / JOURNAL
    with storage(journal):
        first, last = _first_line(journal)
        if first is not None and not first.endswith(b"\n") and last:
            first = None  # the last write, torn: the journal sets it aside, as any torn tail
    if first is not None:
        if not _is_run_start(first):
            raise RunError(
                f"{journal} does not begin with a run start (after any notices): it was "
                f"replaced or damaged; {AFRESH}"
            )
        then, size = journal_size_then(journal), journal.stat().st_size
        if then is not None and size < then:
            raise RunError(
                f"{journal} is shorter ({size:,} bytes) than when its snapshot was taken "
                f"({then:,}): records were cut from it; if you restored an older copy on "
                f"purpose, remove {snapshot_path(journal).name} beside it; else {AFRESH}"
            )
        return
    usage = state_dir / USAGE
    if started_mark(state_dir).exists() or (usage.exists() and usage.stat().st_size):
        what = "its journal is gone" if state_dir.exists() else "the state folder is gone"
        raise RunError(
            f"a run began in {state_dir} and {what} ({journal} is missing, empty or holds no "
            f"whole line): {AFRESH}"
        )


def fresh_state(state_dir: Path) -> Path | None:
    """Move an old run aside (never delete it) so the next run starts from nothing."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    mark = started_mark(state_dir)
    if not state_dir.exists() or not any(state_dir.iterdir()):
        if mark.exists():
            mark.rename(mark.with_name(f"{mark.name}.{stamp}"))
        return None
    lock = state_dir / LOCK
    if lock.exists():
        with lock.open("a+") as handle:  # closing it releases the flock at once
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunError(
                    f"a supervisor is running on {state_dir}; stop it before starting afresh"
                ) from None
    aside = state_dir.with_name(f"{state_dir.name}.{stamp}")
    state_dir.rename(aside)
    if mark.exists():
        mark.rename(aside / mark.name)
    return aside
