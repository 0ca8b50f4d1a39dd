"""What people watch, written after each journal record: `events.jsonl`, `token_usage.jsonl`,
the same events on the terminal, and `status.json`.

Only the journal's records make events (`record_events.py`), so all of them always agree with it.
Every line of both files carries one `seq`, in the order they were written. Kinds and fields are in
docs/logs.md.

The terminal (`Terminal`): one line per model call (session, call, context against the soft and
hard lines, tokens, then each tool the reply called and how it ended), and the events between
calls as lines of their own, each fitted to the terminal's width. Colour on a terminal, plain
lines in a pipe; `--quiet` keeps only what needs a person (errors, warnings, the end). `tail`
shows a run's logs through the same class, so it prints the lines the run's terminal did. A
call's line waits for its tools: the events that come while they run (an output cut, a blocked
command) follow it rather than split it.

`status.json` (`Summary`): where the run stands, so that `status` reads one small file instead of
folding the journal. Made from the events a record makes and the state folded so far, by the same
`update` that `status` folds the journal with when the file is missing, older than the journal's
last record (a kill between the two writes) or of another format. Written atomically (a crash
leaves the old one or the new one).

Light to import: `tail` and `status` print through `Terminal` and read `status.json`, and fold
no record; what makes events of records, and the fold, are imported where a record is written
or the journal folded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from ouroboros.ground.errors import unwritable
from ouroboros.ground.jsonl import JsonlReader, JsonlWriter, last_line
from ouroboros.ground.state_folder import EVENTS, JOURNAL, SUMMARY, USAGE
from ouroboros.observe.describe import call_line, describe, line_width

if TYPE_CHECKING:
    from ouroboros.state.fold import RunState
    from ouroboros.state.records import JournalRecord


class EventLog:
    """Writes both files and echoes each event, as `tail` shows it, to `terminal`. Opens nothing
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
        from ouroboros.sinks.record_events import USAGE_KIND, events_of  # see the module's doc

        made = events_of(record, state)
        for event in made:
            self.seq += 1
            written = {"seq": self.seq, **event}
            (usage if event["kind"] == USAGE_KIND else events).append(written)
            self.terminal.event(written)
        # After the events: a crash between leaves `status.json` behind the journal, which
        # `status` sees and folds the journal instead.
        summary.record(made, state)

    def close(self) -> None:
        self.terminal.flush()
        if self._files is not None:
            self._files[0].close()
            self._files[1].close()


QUIET_KINDS = frozenset(
    {"error", "warning", "run_end", "wind_down_missed", "context_overflow", "retry"}
)
"""What `--quiet` keeps; a wait for the server among them: a run that waits says so."""


class Terminal:
    """`tools`: each tool call also a line of its own (`tail --tools`). `fatal_said_elsewhere`:
    the run's fatal error is not printed, as the CLI says it on stderr (said once)."""

    def __init__(
        self,
        console: Console,
        quiet: bool = False,
        tools: bool = False,
        fatal_said_elsewhere: bool = False,
    ):
        self.console = console
        self.quiet = quiet
        self.tools = tools
        self.fatal_said_elsewhere = fatal_said_elsewhere
        self.call: dict[str, Any] | None = None
        self.outcomes: list[dict[str, Any]] = []
        self.calls_left = 0
        self.held: list[dict[str, Any]] = []
        self.ended = False
        """A `run_end` event was printed: the run's end is said."""

    def event(self, event: dict[str, Any]) -> None:
        """An event of either log, as it was written."""
        kind = event.get("kind")
        if kind == "error" and event.get("fatal") and self.fatal_said_elsewhere:
            return
        if self.quiet:
            if kind in QUIET_KINDS:
                self._print(event)
            return
        if kind == "token_usage":
            self.flush()
            self.call, self.outcomes = event, []
            self.calls_left = int(event.get("tool_calls") or 0)
            if not self.calls_left:
                self.flush()
        elif kind == "tool_call" and self.call is not None:
            self.outcomes.append(event)
            if self.tools:
                self.held.append(event)
            self.calls_left -= 1
            if self.calls_left <= 0:
                self.flush()
        elif self.call is not None and kind not in ("session_end", "run_end", "session_start"):
            self.held.append(event)
        else:
            self.flush()
            self._print(event)

    def flush(self) -> None:
        """The waiting call's line, then what came while its tools ran."""
        if self.call is not None:
            self.console.print(call_line(self.call, self.outcomes, line_width(self.console)))
            self.call = None
        held, self.held = self.held, []
        for line in held:
            self._print(line)

    def _print(self, event: dict[str, Any]) -> None:
        text: Text | None = describe(event, self.tools, line_width(self.console))
        if text is not None:
            self.console.print(text)
            self.ended = self.ended or event.get("kind") == "run_end"


SUMMARY_FORMAT = 3
"""3: with the newest record's time (`last_ts`), where a stopped run's wall time ends."""
MAX_WARNINGS = 3


def of_state(state: RunState) -> dict[str, Any]:
    """What `status` needs of the run's folded state, as plain JSON."""
    end = state.run_end
    prefill = state.prefill
    return {
        "started_at": state.started_at,
        "last_ts": state.last_ts,
        "session": state.session,
        "session_open": state.session_open,
        "ended_reason": None if state.ended_reason is None else str(state.ended_reason),
        "session_turns": state.session_turns,
        "total_turns": state.total_turns,
        "restarts": state.restarts,
        "prompt_tokens": state.total_prompt_tokens,
        "completion_tokens": state.total_completion_tokens,
        "prefill": {
            "calls": prefill.calls,
            "cached_tokens": prefill.cached_tokens,
            "processed_tokens": prefill.processed_tokens,
            "timed_calls": prefill.timed_calls,
            "prefill_ms": prefill.prefill_ms,
        },
        "run_end": None
        if end is None
        else {"reason": str(end.reason), "detail": end.detail, "ts": end.ts},
        "loops": {
            "detections": state.loops.detections,
            "restarts": state.loops.restarts,
            "latest": None
            if state.loops.latest is None
            else state.loops.latest.model_dump(include={"ts", "loop", "evidence", "level"}),
        },
        "limits": None if state.limits is None else state.limits.model_dump(),
        "window": None if state.window is None else state.window.model_dump(),
        "tool_calls": state.protocol.line(),
        "plan": state.plan.summary() if state.plan.changes else None,
        "tools": state.tools,
    } | {key: value for part in state.parts.values() for key, value in part.said().items()}


def update(data: dict[str, Any], events: list[dict[str, Any]], state: RunState) -> None:
    """`data` after a record that made `events` and left the run in `state`."""
    for event in events:
        kind = event["kind"]
        if kind == "token_usage":
            data["last_usage"] = event
            data["waiting"] = None
        elif kind == "retry":
            # A streak of retries is one wait: since its first, until a call gets through.
            waiting = data.get("waiting") or {"since": event["ts"]}
            waiting.update(
                attempt=event.get("attempt"),
                wait_s=event.get("wait_s"),
                ts=event["ts"],
                message=event.get("message"),
                server=event.get("server"),
                unreachable=event.get("unreachable"),
            )
            data["waiting"] = waiting
        elif kind == "warning":
            # What the run warned of (a smaller window than configured, a cache the server
            # drops): the newest few, for `status` to repeat.
            said = event.get("message")
            warnings = [w for w in data.get("warnings", []) if w.get("message") != said]
            data["warnings"] = [*warnings, event][-MAX_WARNINGS:]
        # Once the run ended, its end is its last event: what follows is the harness putting
        # things away (the managed server stopped, with its log's last lines).
        ended = state.run_end is not None and kind != "run_end"
        if kind not in ("token_usage", "tool_call") and not ended:
            data["last_event"] = event
        if kind in ("run_start", "run_end"):
            data["waiting"] = None
    data["run"] = of_state(state)


class Summary:
    """The journal's last sink: `status.json` after each record."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / SUMMARY
        self.journal = state_dir / JOURNAL
        # Folded from the journal where this run's summary is not whole: a resume goes on
        # from what the journal says, not from a file a kill left behind it.
        self.data = read(state_dir) or folded(state_dir)[0]

    def record(self, events: list[dict[str, Any]], state: RunState) -> None:
        update(self.data, events, state)
        self.data["journal_bytes"] = self.journal.stat().st_size if self.journal.exists() else 0
        self.save()

    def save(self) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        # A summary that cannot be written would leave `status` telling an old story: the run
        # stops and says so (its records are on disk already).
        try:
            temporary.write_text(json.dumps(self.data, default=str))
            os.replace(temporary, self.path)
        except OSError as e:
            raise unwritable(self.path, e) from None


def read(state_dir: Path) -> dict[str, Any] | None:
    """The run's `status.json`, where it is of this format and as long as the journal (None:
    fold the journal)."""
    try:
        data = json.loads((state_dir / SUMMARY).read_text())
        size = (state_dir / JOURNAL).stat().st_size
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != SUMMARY_FORMAT:
        return None
    return data if data.get("journal_bytes") == size else None


def folded(state_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """`status.json` as the run would have written it, folded from its journal alone; and the
    journal's problems (lines skipped)."""
    from ouroboros.sinks.record_events import events_of  # see the module's doc
    from ouroboros.state.fold import RunState
    from ouroboros.state.records import JOURNAL_RECORD

    data: dict[str, Any] = {"format": SUMMARY_FORMAT}
    state = RunState()
    reader = JsonlReader(state_dir / JOURNAL)
    for record in reader.records(JOURNAL_RECORD):
        state.apply(record)
        update(data, events_of(record, state), state)
    data["run"] = of_state(state)
    return data, [str(p) for p in reader.problems]
