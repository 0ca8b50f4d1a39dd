"""Watching a run from outside: `tail` (both logs merged in time order, as they grow) and
`status` (is it alive, where it stands, what is left).

Both only read the state folder. They never repair a torn line (that is the supervisor's job when
it starts): a last line without its newline is a write still in progress, and `tail --follow`
waits for the rest. `status` takes the lock only for the instant it needs to see whether someone
else holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ouroboros.config import Settings
from ouroboros.events import ZONE_STYLE, bar
from ouroboros.journal import read_jsonl
from ouroboros.state import RunState, replay

USAGE_FILE = "token_usage.jsonl"
EVENTS_FILE = "events.jsonl"
POLL_S = 0.25
SETTLE_S = 0.05
"""A record stamped this long before a read began is on disk in both files by then."""
MAX_HOLD_S = 1.0
"""Held-back records go out after this long whatever their stamps say (a writer's clock ahead)."""
"""The colours of the run's own terminal lines (events.py)."""


# --- reading two growing files -------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    raw: str
    """The line exactly as written, without its newline."""
    record: dict[str, Any]

    @property
    def ts(self) -> str:
        return str(self.record.get("ts", ""))


@dataclass
class Follower:
    """The new whole lines of one JSONL file since the last read.

    A line without its newline is not complete yet: it stays unread until the rest arrives. A file
    that was replaced or cut short (`run --fresh` moves the folder aside) is read from the start.
    """

    path: Path
    offset: int = 0
    inode: int | None = None
    torn: bytes = b""
    """What follows the last newline: a line being written, or cut short by a crash."""
    problems: list[str] = field(default_factory=list)

    def read(self) -> list[Line]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        if self.inode is not None and (stat.st_ino != self.inode or stat.st_size < self.offset):
            self.offset = 0
        self.inode = stat.st_ino
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.torn = data[end:]
        self.offset += end
        return [line for raw in data[:end].split(b"\n") if (line := self._parse(raw))]

    def _parse(self, raw: bytes) -> Line | None:
        if not raw.strip():
            return None
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            self.problems.append(f"{self.path.name}: skipped a line that is not a JSON record")
            return None
        return Line(raw.decode("utf-8", "replace"), record)


@dataclass
class Merger:
    """Both logs as one stream in time order.

    The two files are read one after the other, so a poll can see a new event before the usage
    line written just before it. Records stamped after the poll began are held back until the
    next poll (or until a poll finds nothing new), when both files have caught up.
    """

    followers: list[Follower]
    pending: list[Line] = field(default_factory=list)
    held_since: float = field(default_factory=time.monotonic)

    @classmethod
    def for_state(cls, state_dir: Path) -> Merger:
        return cls([Follower(state_dir / USAGE_FILE), Follower(state_dir / EVENTS_FILE)])

    def poll(self, final: bool = False) -> list[Line]:
        cutoff = (datetime.now(UTC) - timedelta(seconds=SETTLE_S)).isoformat(
            timespec="milliseconds"
        )
        fresh = [line for follower in self.followers for line in follower.read()]
        self.pending.extend(fresh)
        # Stable sort: on equal stamps the usage line goes first, as the harness writes it first.
        self.pending.sort(key=lambda line: line.ts)
        if final or not fresh or time.monotonic() - self.held_since > MAX_HOLD_S:
            ready, self.pending = self.pending, []
        else:
            ready = [line for line in self.pending if line.ts <= cutoff]
            self.pending = self.pending[len(ready) :]
        if not self.pending or ready:
            self.held_since = time.monotonic()
        return ready

    def problems(self) -> list[str]:
        found = [p for f in self.followers for p in f.problems]
        for f in self.followers:
            f.problems.clear()
        return found


# --- one readable line per record ------------------------------------------------------------


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def usage_text(r: dict[str, Any]) -> Text:
    zone = str(r.get("zone", "normal"))
    fraction = float(r.get("fraction", 0.0))
    text = Text(f"s{r.get('session')} t{r.get('turn', '?'):<4} ")
    if r.get("purpose"):  # a call outside the conversation (a compaction snapshot): no turn
        text.append(f"[{r['purpose']}] ", style="cyan")
    text.append(f"{bar(fraction)} {fraction:4.0%} {zone:<6}", style=ZONE_STYLE.get(zone, "white"))
    text.append(
        f" prompt {_n(r.get('prompt_tokens'))} + out {_n(r.get('completion_tokens'))} "
        f"/ {_n(r.get('context_limit'))}"
    )
    text.append(f" ({r.get('source')})", style="dim")
    return text


Describe = Callable[[dict[str, Any]], str]

_DESCRIBE: dict[str, tuple[str, Describe]] = {
    "run_start": (
        "bold",
        lambda r: f"run {'resumed' if r.get('resumed') else 'started'}: model {r.get('model')}",
    ),
    "run_end": ("bold", lambda r: f"run ended: {r.get('reason')} {r.get('message', '')}"),
    "context_window": (
        "dim",
        lambda r: (
            f"window {_n(r.get('context_limit'))} tokens ({r.get('server')}: {r.get('detail')})"
        ),
    ),
    "session_start": ("bold", lambda r: f"session {r.get('session')} starts ({r.get('reason')})"),
    "session_end": (
        "bold",
        lambda r: (
            f"session {r.get('session')} ends after {r.get('turns')} turns: "
            f"{r.get('reason')} ({r.get('detail') or 'no detail'})"
        ),
    ),
    "session_restart": (
        "bold magenta",
        lambda r: (
            f"restart {r.get('restarts')}: session {r.get('session')} after "
            f"{r.get('previous_turns')} turns ({r.get('reason')}), "
            f"{r.get('carried_messages')} messages carried over"
        ),
    ),
    "context_mask": (
        "magenta",
        lambda r: (
            f"masked {r.get('masked')} old result(s) ({r.get('total_masked')} in all, "
            f"{r.get('reason')}): ~{_n(r.get('estimated_reclaimed'))} tokens reclaimed, "
            f"next prompt {_n(r.get('measured_prompt_tokens'))}"
        ),
    ),
    "compaction": (
        "magenta",
        lambda r: (
            f"compacted {r.get('messages_replaced')} old messages into a snapshot"
            f"{' (requested)' if r.get('forced') else ''}: next prompt "
            f"~{_n(r.get('projected_before'))} -> ~{_n(r.get('projected_after'))} tokens"
        ),
    ),
    "compaction_failed": ("yellow", lambda r: f"compaction skipped: {r.get('message')}"),
    "truncation": (
        "yellow",
        lambda r: (
            f"{r.get('name')} output cut from {_n(r.get('original_bytes'))} to "
            f"{_n(r.get('kept_bytes'))} bytes"
        ),
    ),
    "wind_down": (
        "bold yellow",
        lambda r: (
            f"wind-down: next prompt ~{_n(r.get('projected'))} tokens, ~{_n(r.get('room'))} "
            f"left before the cut (hard line {_n(r.get('hard_line'))}); "
            f"{r.get('turns_left')} replies left"
        ),
    ),
    "wind_down_missed": (
        "bold red",
        lambda r: (
            f"no wind-down: one step took the next prompt to ~{_n(r.get('projected'))} tokens, "
            f"past the hard line {_n(r.get('hard_line'))} and the cut "
            f"{_n(r.get('prompt_budget'))}"
        ),
    ),
    "silent_truncation": (
        "bold red",
        lambda r: (
            f"silent truncation: the server counted {_n(r.get('reported_prompt_tokens'))} "
            f"prompt tokens, ~{_n(r.get('estimated_prompt_tokens'))} were sent"
        ),
    ),
    "context_overflow": (
        "bold red",
        lambda r: (
            f"context overflow: {_n(r.get('n_prompt_tokens'))} tokens > window "
            f"{_n(r.get('n_ctx'))} (attempt {r.get('attempt')})"
        ),
    ),
    "retry": (
        "yellow",
        lambda r: f"retry {r.get('attempt')} in {r.get('wait_s')} s: {r.get('message')}",
    ),
    "blocked_command": (
        "red",
        lambda r: f"blocked ({r.get('rule')}): {r.get('arguments')}",
    ),
    "warning": ("yellow", lambda r: f"warning: {r.get('message')}"),
    "waiting": ("yellow", lambda r: f"waiting: {r.get('message')}"),
    "error": ("bold red", lambda r: f"error: {r.get('message')}"),
    "tool_call": (
        "dim",
        lambda r: (
            f"  {r.get('name')} {_n(r.get('output_bytes'))} bytes in {r.get('duration_s')} s"
            + (f" exit {r['exit_code']}" if r.get("exit_code") is not None else "")
            + (f" error: {r['error']}" if r.get("error") else "")
        ),
    ),
}


def _generic(r: dict[str, Any]) -> str:
    """A kind this version does not know yet: show its fields as they are."""
    fields = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("v", "ts", "kind"))
    return f"{r.get('kind')} {fields}"


def describe(record: dict[str, Any], tools: bool = False) -> Text | None:
    """The readable line of one record; None for a record not worth a line."""
    kind = str(record.get("kind"))
    stamp = Text(str(record.get("ts", ""))[11:19] + " ", style="dim")
    if kind == "token_usage":
        return stamp + usage_text(record)
    if kind == "tool_call" and not tools and not record.get("error"):
        return None
    style, text = _DESCRIBE.get(kind, ("cyan", _generic))
    return stamp + Text(text(record).rstrip(), style=style)


# --- the commands ---------------------------------------------------------------------------


@dataclass
class TailOptions:
    follow: bool = False
    as_json: bool = False
    tools: bool = False


def _show(lines: Iterable[Line], merger: Merger, options: TailOptions, out: Console) -> None:
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
        _show(merger.poll(final=True), merger, options, out)
        for problem in merger.problems():
            err.print(f"[yellow]{problem}[/]")
        for follower in merger.followers:
            if follower.torn:
                err.print(f"[dim]{follower.path.name}: its last line is not complete yet[/]")
        return 0
    if not (state_dir / EVENTS_FILE).exists():
        err.print(f"[dim]waiting for a run in {state_dir} (Ctrl-C to stop)[/]")
    try:
        while True:
            _show(merger.poll(), merger, options, out)
            for problem in merger.problems():
                err.print(f"[yellow]{problem}[/]")
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        return 0


@dataclass(frozen=True)
class Liveness:
    alive: bool
    pid: int | None
    detail: str


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, but it exists
    return True


def _lock_held(path: Path) -> bool:
    """Try the supervisor's flock without waiting, and give it back at once."""
    with path.open("rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def liveness(state_dir: Path) -> Liveness:
    """Alive means both: the pid in `lock` exists and the flock on `lock` is held."""
    path = state_dir / "lock"
    if not path.exists():
        return Liveness(False, None, "never started here")
    text = path.read_text().strip()
    pid = int(text) if text.isdigit() else None
    held = _lock_held(path)
    if held and pid is not None and _pid_alive(pid):
        return Liveness(True, pid, f"pid {pid}")
    if held:
        return Liveness(False, pid, f"the lock is held but pid {text or '?'} is not alive")
    if pid is None:
        return Liveness(False, None, "the supervisor released its lock")
    return Liveness(False, pid, f"pid {pid} left its lock behind: killed or crashed")


def last_records(path: Path, kinds: set[str]) -> dict[str, dict[str, Any]]:
    """The last record of each kind, read from the end (an events file of a long run is big)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for raw in reversed(data.splitlines()):
        if not any(f'"kind":"{kind}"'.encode() in raw for kind in kinds - found.keys()):
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            continue  # a torn last line: not complete yet
        if isinstance(record, dict) and record.get("kind") in kinds:
            found.setdefault(record["kind"], record)
        if found.keys() == kinds:
            break
    return found


def _age(ts: str | None, now: float) -> str:
    if not ts:
        return "never"
    return f"{duration(now - datetime.fromisoformat(ts).timestamp())} ago"


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


@dataclass(frozen=True)
class Snapshot:
    state_dir: Path
    live: Liveness
    state: RunState
    usage: dict[str, Any] | None
    events: dict[str, dict[str, Any]]
    now: float


def snapshot(state_dir: Path, now: float | None = None) -> Snapshot:
    """Everything `status` shows, read without writing a byte."""
    journal = read_jsonl(state_dir / "journal.jsonl")
    usage = last_records(state_dir / USAGE_FILE, {"token_usage"}).get("token_usage")
    events = last_records(state_dir / EVENTS_FILE, {"error", "run_start", "run_end"})
    return Snapshot(
        state_dir,
        liveness(state_dir),
        replay(journal.records),
        usage,
        events,
        time.time() if now is None else now,
    )


def _run_line(snap: Snapshot) -> Text:
    if snap.live.alive:
        return Text(f"running ({snap.live.detail})", style="bold green")
    if snap.state.run_end:
        return Text(f"over: ended by {snap.state.run_end} for good", style="bold")
    latest = max(snap.events.values(), key=lambda r: str(r.get("ts")), default=None)
    kind = latest and latest.get("kind")
    if latest and kind == "run_end":
        return Text(f"not running: stopped ({latest.get('reason')})", style="bold")
    if kind == "error":
        return Text("not running: stopped by an error (below)", style="bold red")
    return Text(f"not running: {snap.live.detail}", style="bold yellow")


def _left(limit: float | None, used: float, show: Callable[[float], str]) -> str:
    if not limit:
        return f"unlimited ({show(used)} used)"
    return f"{show(max(0, limit - used))} left of {show(limit)}"


def _budgets(settings: Settings, snap: Snapshot) -> list[tuple[str, str]]:
    s, st = settings.supervisor, snap.state
    elapsed = snap.now - st.started_at if st.started_at else 0.0
    restarts = "unlimited" if s.max_restarts is None else f"{max(0, s.max_restarts - st.restarts)}"
    return [
        ("turns", _left(s.max_total_turns, st.total_turns, lambda v: f"{int(v):,}")),
        ("tokens", _left(s.max_total_tokens, st.total_tokens, lambda v: f"{int(v):,}")),
        ("wall time", _left(s.max_wall_time_s, elapsed, duration)),
        ("restarts", f"{restarts} left ({st.restarts} used)"),
    ]


def _context(usage: dict[str, Any] | None) -> Text:
    if usage is None:
        return Text("no model call yet", style="dim")
    zone = str(usage.get("zone", "normal"))
    fraction = float(usage.get("fraction", 0.0))
    text = Text(f"{bar(fraction)} {fraction:.0%} {zone}", style=ZONE_STYLE.get(zone, "white"))
    text.append(
        f"  {_n(usage.get('total_tokens'))} of {_n(usage.get('context_limit'))} tokens "
        f"(session {usage.get('session')}, turn {usage.get('turn')}, {usage.get('source')})"
    )
    return text


def render_status(snap: Snapshot, settings: Settings) -> Panel:
    st = snap.state
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", justify="right")
    grid.add_column()
    grid.add_row("run", _run_line(snap))
    session = f"{st.session} ({'open' if st.session_open else f'ended: {st.ended_reason}'})"
    grid.add_row("session", session if st.session else "none yet")
    grid.add_row("turns", f"{st.session_turns:,} this session, {st.total_turns:,} in all")
    grid.add_row("restarts", f"{st.restarts}")
    grid.add_row("context", _context(snap.usage))
    grid.add_row(
        "tokens",
        f"{st.total_prompt_tokens:,} prompt + {st.total_completion_tokens:,} completion "
        f"= {st.total_tokens:,}",
    )
    grid.add_row("last model call", _age(snap.usage.get("ts") if snap.usage else None, snap.now))
    error = snap.events.get("error")
    grid.add_row(
        "last error",
        Text(f"{_age(error['ts'], snap.now)}: {error.get('message')}", style="red")
        if error
        else Text("none", style="dim"),
    )
    grid.add_row("", "")
    for name, value in _budgets(settings, snap):
        grid.add_row(f"{name} budget", value)
    return Panel(grid, title=f"ouroboros: {snap.state_dir}", title_align="left", expand=False)


def status(state_dir: Path, settings: Settings, out: Console) -> int:
    if not state_dir.exists():
        out.print(f"no run in {state_dir}")
        return 1
    out.print(render_status(snapshot(state_dir), settings))
    return 0


class _StdoutConsole(Console):
    def on_broken_pipe(self) -> None:
        raise BrokenPipeError  # rich would exit 1; `tail | head` ending early is no failure


def stdout_console() -> Console:
    return _StdoutConsole(file=sys.stdout, highlight=False, soft_wrap=True)
