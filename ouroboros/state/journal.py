"""The journal: the truth of a run. Every record is written (and fsync'ed) first, then folded
into the run's state, then handed to the sinks that write what people read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ouroboros.ground.jsonl import JsonlReader, JsonlWriter, Problem, storage
from ouroboros.state import snapshot
from ouroboros.state.fold import RunState
from ouroboros.state.records import JOURNAL_RECORD, JournalRecord, Notice, NoticeKind, SessionStart

Sink = Callable[[JournalRecord, RunState], None]
"""Called with each record once it is on disk and folded."""


def fold(path: Path) -> tuple[RunState, JsonlReader]:
    """The state of the run the journal at `path` holds: from its snapshot where one belongs
    to it, then every complete record after (bad lines are skipped, and listed in the
    reader's `problems`). Reads only."""
    start = snapshot.load(path)
    state, offset, lines = start if start is not None else (RunState(), 0, 0)
    reader = JsonlReader(path, offset, lines)
    for record in reader.records(JOURNAL_RECORD):
        state.apply(record)
    return state, reader


class Journal:
    """Appends records to `path` (none: folded in memory only, for benches and tests), each
    fsync'ed unless not `durable` (a bench writing a long journal)."""

    def __init__(self, path: Path | None, durable: bool = True):
        self.sinks: list[Sink] = []
        self.problems: list[Problem] = []
        self.torn_aside: Path | None = None
        self._writer: JsonlWriter | None = None
        self.state = RunState()
        self._lines = 0
        if path is not None:
            with storage(path):
                self.state, reader = fold(path)
                self._writer = JsonlWriter(path, durable)
            self.problems, self._lines = reader.problems, reader.line
            self.torn_aside = self._writer.torn_aside

    def append(self, record: JournalRecord) -> None:
        """Write first: nothing depends on a record before it is on disk."""
        if self._writer is None:
            self.state.apply(record)
        else:
            line = record.model_dump_json(exclude_none=True)  # absent is None: shorter
            written = self._writer.write(line)
            self._lines += 1
            self.state.apply(record)
            if isinstance(record, SessionStart):
                size = self._writer.size
                snapshot.save(self._writer.path, self.state, size, self._lines, written)
        for sink in self.sinks:
            sink(record, self.state)

    def notify(
        self,
        event: NoticeKind,
        message: str = "",
        *,
        session: int | None = None,
        once: str | None = None,
        **details: int | float | str | bool | None,
    ) -> None:
        """Journals news a reader shows (a warning, a wait, ...); one named by `once` is given
        once a run, as the fold remembers it."""
        if once is not None and once in self.state.warned:
            return
        self.append(
            Notice(event=event, message=message, session=session, once=once, details=details)
        )

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
