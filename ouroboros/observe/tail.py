"""`tail`: both logs as one stream, in the order they were written, as they grow.

It only reads the state folder and never repairs a torn line (that is the supervisor's job when
it starts): a last line without its newline is a write still in progress, and `tail --follow`
waits for the rest. A line that is not a record is skipped and said so.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ouroboros.ground.jsonl import JsonlReader, offset_of_last
from ouroboros.ground.state_folder import EVENTS, USAGE
from ouroboros.observe.describe import makes_line
from ouroboros.sinks.events import Terminal

POLL_S = 0.25
MAX_HOLD_S = 1.0
"""A line waits at most this long for the lines numbered before it (a line a crash lost)."""


@dataclass(frozen=True)
class Line:
    raw: str
    """The line exactly as written, without its newline."""
    record: dict[str, Any]

    @property
    def order(self) -> tuple[int, str]:
        # Lines written before `seq` existed sort by time, before every numbered line.
        return int(self.record.get("seq", 0)), str(self.record.get("ts", ""))


@dataclass
class Follower:
    """The new complete lines of one file at each `read`, from byte `start` on. A file that was
    replaced or cut short (`run --fresh` moves the folder aside) is read from its start."""

    path: Path
    start: int = 0
    reader: JsonlReader = field(init=False)
    inode: int | None = None

    def __post_init__(self) -> None:
        self.reader = JsonlReader(self.path, offset=self.start)

    def read(self) -> list[Line]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        if self.inode is not None and (
            stat.st_ino != self.inode or stat.st_size < self.reader.offset
        ):
            self.reader = JsonlReader(self.path)
        self.inode = stat.st_ino
        reader = self.reader
        return [
            Line(reader.raw.decode("utf-8", "replace").rstrip("\n"), record)
            for record in reader.objects()
        ]


@dataclass
class Merger:
    """Both logs as one stream in `seq` order. The files are read one after the other, so a
    poll can see a line before one numbered just below it in the other file: a line goes out
    once every number before it has (or after `MAX_HOLD_S`)."""

    followers: list[Follower]
    pending: list[Line] = field(default_factory=list)
    shown: int = 0
    """The highest `seq` that went out."""
    held_since: float = field(default_factory=time.monotonic)

    @classmethod
    def for_state(cls, state_dir: Path) -> Merger:
        return cls([Follower(state_dir / USAGE), Follower(state_dir / EVENTS)])

    def poll(self, final: bool = False) -> list[Line]:
        self.pending.extend(line for f in self.followers for line in f.read())
        self.pending.sort(key=lambda line: line.order)
        if final or time.monotonic() - self.held_since > MAX_HOLD_S:
            ready, self.pending = self.pending, []
        else:
            ready = []
            for line in self.pending:
                seq = line.order[0]
                if seq and self.shown and seq > self.shown + 1:
                    break  # a line numbered before it is not read yet
                ready.append(line)
                self.shown = max(self.shown, seq)
            self.pending = self.pending[len(ready) :]
        self.shown = max([self.shown, *(line.order[0] for line in ready)])
        if not self.pending or ready:
            self.held_since = time.monotonic()
        return ready

    def problems(self) -> list[str]:
        found = [str(p) for f in self.followers for p in f.reader.problems]
        for f in self.followers:
            f.reader.problems.clear()
        return found


@dataclass
class TailOptions:
    follow: bool = False
    as_json: bool = False
    tools: bool = False
    lines: int | None = None
    """Only the last so many lines shown (`--follow` starts with the last `FOLLOW_BACKLOG`)."""
    since: datetime | None = None
    session: int | None = None

    def wants(self, line: Line) -> bool:
        record = line.record
        if self.session is not None and record.get("session") != self.session:
            return False
        if self.since is not None:
            try:
                if datetime.fromisoformat(str(record.get("ts"))) < self.since:
                    return False
            except ValueError:
                return False
        return self.as_json or self.counts(record) or record.get("kind") == "tool_call"

    def counts(self, record: dict[str, Any]) -> bool:
        """A line of its own (a tool call is one only with `tools`, else it ends its call's
        line): what `lines` counts."""
        if record.get("kind") == "tool_call":
            return self.as_json or self.tools
        return self.as_json or makes_line(record)


FOLLOW_BACKLOG = 10
"""`tail --follow` first shows this many lines, as tail(1) does, then what the run appends."""


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`2026-11-23T14:00` (local time unless it says), or an age: `90s`, `10m`, `2h`, `1d`."""
    now = now or datetime.now().astimezone()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[:-1].isdigit() and text[-1:] in units:
        return now - timedelta(seconds=int(text[:-1]) * units[text[-1]])
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--since {text!r}: give a time (2026-11-23T14:00) or an age (90s, 10m, 2h, 1d)"
        ) from None
    return moment if moment.tzinfo else moment.astimezone()


def _selected(state_dir: Path, options: TailOptions, last: int | None) -> tuple[Merger, list[Line]]:
    """The lines to show first: every wanted one, or the last `last` of them. Each file is read
    from near its end, and further back only until it holds `last` wanted lines."""
    paths = (state_dir / USAGE, state_dir / EVENTS)
    reach = None if last is None else max(2 * last, 20)
    while True:
        followers = [Follower(p, offset_of_last(p, reach) if reach else 0) for p in paths]
        per_file = [[line for line in f.read() if options.wants(line)] for f in followers]
        enough = all(
            sum(options.counts(line.record) for line in w) >= (last or 0) or not f.start
            for w, f in zip(per_file, followers, strict=True)
        )
        if reach is None or enough:
            break
        reach *= 4
    lines = sorted((line for w in per_file for line in w), key=lambda line: line.order)
    if last is not None:
        lines = _last(lines, last, options)
    merger = Merger(followers, shown=max((line.order[0] for line in lines), default=0))
    return merger, lines


def _last(lines: list[Line], last: int, options: TailOptions) -> list[Line]:
    """The lines from the `last`-th line of its own from the end on (with the tool calls that
    end the call lines among them)."""
    if not last:
        return []
    seen = 0
    for at in range(len(lines) - 1, -1, -1):
        seen += options.counts(lines[at].record)
        if seen == last:
            return lines[at:]
    return lines


def _show(lines: Iterable[Line], options: TailOptions, out: Console, terminal: Terminal) -> None:
    for line in lines:
        if not options.wants(line):
            continue
        if options.as_json:
            out.file.write(line.raw + "\n")
        else:
            terminal.event(line.record)
    out.file.flush()


def tail(state_dir: Path, options: TailOptions, out: Console, err: Console) -> int:
    """Print both logs merged (all, or the last `lines`, of a session, since a time); with
    `follow`, start near the end and keep printing what the run appends. The lines are the
    run's terminal's (`Terminal`), fitted to `out`'s width."""
    terminal = Terminal(out, tools=options.tools)
    if not options.follow:
        if not any((state_dir / name).exists() for name in (USAGE, EVENTS)):
            err.print(f"no run in {escape(str(state_dir))} (use --follow to wait for one)")
            return 1
        merger, lines = _selected(state_dir, options, options.lines)
        _show(lines, options, out, terminal)
        terminal.flush()
        for problem in merger.problems():
            err.print(f"[yellow]{escape(problem)}[/]")
        for follower in merger.followers:
            if follower.reader.torn:
                err.print(f"[dim]{follower.path.name}: its last line is not complete yet[/]")
        return 0
    if not (state_dir / EVENTS).exists():
        err.print(f"[dim]waiting for a run in {escape(str(state_dir))} (Ctrl-C to stop)[/]")
    backlog = FOLLOW_BACKLOG if options.lines is None else options.lines
    merger, lines = _selected(state_dir, options, backlog)
    _show(lines, options, out, terminal)
    try:
        while True:
            _show(merger.poll(), options, out, terminal)
            for problem in merger.problems():
                err.print(f"[yellow]{escape(problem)}[/]")
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        terminal.flush()  # a call line still waiting for its tools' lines
        return 0
