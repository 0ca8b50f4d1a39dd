"""What people watch: `events.jsonl`, `token_usage.jsonl`, and the same lines on the terminal.

Only the journal's records make lines (`lines.py`), so the two files always agree with it;
`status.json` is kept from the same lines and the folded state. Every line of both files
carries one `seq`, in the order they were written. Kinds and fields are in docs/logs.md.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from ouroboros.ground.jsonl import JsonlWriter, last_line
from ouroboros.ground.state_folder import EVENTS, USAGE
from ouroboros.sinks.lines import USAGE_KIND, lines_of
from ouroboros.sinks.live import Terminal
from ouroboros.sinks.summary import Summary
from ouroboros.state.fold import RunState
from ouroboros.state.records import JournalRecord


class EventLog:
    """Writes both files and echoes each line, as `tail` shows it, to `terminal`. Opens nothing
    before the journal asks for its sinks: that is under the run's lock."""

    def __init__(self, state_dir: Path, terminal: Terminal):
        self.state_dir = state_dir
        self.terminal = terminal
        self._files: tuple[JsonlWriter, JsonlWriter, Summary] | None = None
        self.seq = 0

    def sinks(self) -> list[Callable[[JournalRecord, RunState], None]]:
        """What the journal hands each record to. Opens both logs (setting aside a line a
        crash left torn) and `status.json`: call it holding the lock."""
        if self._files is None:
            events, usage = (JsonlWriter(self.state_dir / name) for name in (EVENTS, USAGE))
            lasts = [last_line(self.state_dir / name) or {} for name in (EVENTS, USAGE)]
            self.seq = max(int(line.get("seq", 0)) for line in lasts)
            self._files = events, usage, Summary(self.state_dir)
        return [partial(self._sink, *self._files)]

    def _sink(
        self,
        events: JsonlWriter,
        usage: JsonlWriter,
        summary: Summary,
        record: JournalRecord,
        state: RunState,
    ) -> None:
        lines = lines_of(record, state)
        for line in lines:
            self.seq += 1
            written = {"seq": self.seq, **line}
            (usage if line["kind"] == USAGE_KIND else events).append(written)
            self.terminal.line(written)
        # After the lines: a crash between leaves `status.json` behind the journal, which
        # `status` sees and folds the journal instead.
        summary.record(lines, state)

    def close(self) -> None:
        self.terminal.flush()
        if self._files is not None:
            self._files[0].close()
            self._files[1].close()
