"""`tail`: both logs as one stream, in the order they were written, as they grow.

It only reads the state folder and never repairs a torn line (that is the supervisor's job when
it starts): a last line without its newline is a write still in progress, and `tail --follow`
waits for the rest. A line that is not a record is skipped and said so.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from ouroboros.events import EVENTS_FILE, USAGE_FILE
from ouroboros.jsonl import JsonlReader
from ouroboros.observe.describe import describe

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
    """The new complete lines of one file at each `read`. A file that was replaced or cut short
    (`run --fresh` moves the folder aside) is read from the start."""

    path: Path
    reader: JsonlReader = field(init=False)
    inode: int | None = None

    def __post_init__(self) -> None:
        self.reader = JsonlReader(self.path)

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
        return cls([Follower(state_dir / USAGE_FILE), Follower(state_dir / EVENTS_FILE)])

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


def _show(lines: Iterable[Line], options: TailOptions, out: Console) -> None:
    for line in lines:
        if options.as_json:
            out.file.write(line.raw + "\n")
        elif (text := describe(line.record, options.tools)) is not None:
            out.print(text)
    out.file.flush()


def tail(state_dir: Path, options: TailOptions, out: Console, err: Console) -> int:
    """Print both logs merged; with `follow`, keep printing what the run appends."""
    merger = Merger.for_state(state_dir)
    if not options.follow:
        if not any((state_dir / name).exists() for name in (USAGE_FILE, EVENTS_FILE)):
            err.print(f"no run in {state_dir} (use --follow to wait for one)")
            return 1
        _show(merger.poll(final=True), options, out)
        for problem in merger.problems():
            err.print(f"[yellow]{problem}[/]")
        for follower in merger.followers:
            if follower.reader.torn:
                err.print(f"[dim]{follower.path.name}: its last line is not complete yet[/]")
        return 0
    if not (state_dir / EVENTS_FILE).exists():
        err.print(f"[dim]waiting for a run in {state_dir} (Ctrl-C to stop)[/]")
    try:
        while True:
            _show(merger.poll(), options, out)
            for problem in merger.problems():
                err.print(f"[yellow]{problem}[/]")
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        return 0


class _StdoutConsole(Console):
    def on_broken_pipe(self) -> None:
        raise BrokenPipeError  # rich would exit 1; `tail | head` ending early is no failure


def stdout_console() -> Console:
    return _StdoutConsole(file=sys.stdout, highlight=False, soft_wrap=True)
