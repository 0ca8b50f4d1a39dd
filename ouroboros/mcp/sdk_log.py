"""The SDK's own warnings (a notification it could not read, an HTTP answer it could not parse)
as the run's notices: one line each, never the traceback Python's fallback handler prints for a
record logged with `exc_info`, and only the first few of each kind, so that a server sending the
same bad message a thousand times gives a thousand lines nowhere."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from ouroboros.state.journal import Journal

SDK_LOGGERS = ("mcp", "client")
"""Where the SDK logs: its modules' own names, and `client` (its `ClientSession`'s)."""
SHOWN_OF_A_KIND = 3
"""Warnings of one kind (the same message before its values) journalled in a run."""
LINE_CHARS = 300


class JournalledWarnings(logging.Handler):
    def __init__(self, journal: Journal):
        super().__init__(logging.WARNING)
        self.journal = journal
        self.seen: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        kind = str(record.msg)
        self.seen[kind] += 1
        if self.seen[kind] > SHOWN_OF_A_KIND:
            return
        said = " ".join(record.getMessage().split())
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            said += f": {' '.join(str(error).split()) or type(error).__name__}"
        more = " (more like it are not shown)" if self.seen[kind] == SHOWN_OF_A_KIND else ""
        self.journal.notify("warning", f"MCP client: {said[:LINE_CHARS]}{more}")


@contextmanager
def sdk_warnings_journalled(journal: Journal) -> Iterator[None]:
    """While the servers run, the SDK's records go to the journal, and nowhere else."""
    loggers = [logging.getLogger(name) for name in SDK_LOGGERS]
    handler = JournalledWarnings(journal)
    propagated = [logger.propagate for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, propagate in zip(loggers, propagated, strict=True):
            logger.removeHandler(handler)
            logger.propagate = propagate
