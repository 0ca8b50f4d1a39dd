"""Hooks: the user's commands run on events of the run (`[hooks]`), the event as one JSON
object on stdin, for telling a person that the run ended, failed, is stuck, waits for its
server, restarted, loops, gave the agent a message or paused.

Whatever the agent wrote, a hook runs: what it says (a `finish` summary of 300 KB, a NUL, an
escape sequence) is whole in the JSON on stdin (a file, which a hook may leave unread), and in
`OUROBOROS_SUMMARY` only printable and cut to `ENV_CHARS` (an exec refuses a NUL, or a variable
over 128 KiB). A hook inherits only what `hooks.env` names of the harness's environment, as a
command `tools.env`: the server's API key stays out.

The journal's last sink: each record, once on disk and folded, may be an event. A hook runs in
a thread of its own and is never waited for while the run goes on; at the end the run waits
for the hooks still running, each at most its `timeout_s`. A hook that fails (not found, an
exit status, killed at its timeout) becomes a warning in the journal, written by the sink
itself when the next record reaches it (or at the end): the journal is only ever written from
the run's own thread.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any

from ouroboros.ground.config import HookCommand, HookEventName, HookSettings
from ouroboros.ground.printable import printable
from ouroboros.operator.records import Letters, Paused, Told
from ouroboros.server.records import ServerStarted
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal
from ouroboros.state.records import (
    EndReason,
    JournalRecord,
    LoopDetected,
    MessageRecord,
    Notice,
    RunEnd,
    RunStart,
    SessionStart,
    SideCall,
)
from ouroboros.tools.environment import allowed_env

ERROR_BYTES = 300
"""Of a failed hook's stderr, what its warning quotes."""
ENV_CHARS = 4096
"""The longest a hook's own variable (`OUROBOROS_SUMMARY`) is, before the marker of a cut."""
LOOP_ACTIONS = {1: "nudged", 2: "restarted", 3: "stopped as stuck"}
GRACE_S = 1.0
"""Past its timeout, how long the end of the run waits for a killed hook to be reaped."""


@dataclass(frozen=True)
class Event:
    name: HookEventName
    summary: str
    """One line a person reads: what a notification shows."""


class Outage:
    """Failed calls to the model server in a row: since the first, until one gets through;
    `waiting` is said once an outage."""

    def __init__(self, after_min: float):
        self.after_s = after_min * 60
        self.since: datetime | None = None
        self.said = False

    def event(self, record: JournalRecord) -> Event | None:
        if isinstance(record, MessageRecord | SideCall | RunStart | RunEnd):
            self.since, self.said = None, False
        if not isinstance(record, Notice) or record.event != "retry":
            return None
        at = datetime.fromisoformat(record.ts)
        self.since = self.since or at
        waited = (at - self.since).total_seconds()
        if self.said or waited < self.after_s:
            return None
        self.said = True
        minutes = f"{waited / 60:.1f}"
        return Event("waiting", f"waiting for the model server for {minutes} min: {record.message}")


def env_value(text: str) -> str:
    """`text` for a hook's environment: printable on one line (no NUL, no escape sequence; a lone
    surrogate as `?`), and cut to `ENV_CHARS` characters with a marker saying so."""
    shown = printable(text).encode(errors="replace").decode()
    if len(shown) <= ENV_CHARS:
        return shown
    cut = f"cut at {ENV_CHARS:,} of {len(shown):,} characters; the whole is in the JSON on stdin"
    return f"{shown[:ENV_CHARS]}… [{cut}]"


def events_of(record: JournalRecord, outage: Outage) -> list[Event]:
    """The events `record` is, for the hooks, the most specific first."""
    waiting = outage.event(record)
    if waiting is not None:
        return [waiting]
    if isinstance(record, RunEnd):
        said = f"run ended: {record.reason}" + (f" ({record.detail})" if record.detail else "")
        events = [Event("run_end", said)]
        if record.reason == EndReason.ERROR:
            events.insert(0, Event("error", said))
        if record.reason == EndReason.STUCK:
            events.insert(0, Event("stuck", said))
        if record.reason == EndReason.STALLED:
            events.insert(0, Event("stalled", said))
        return events
    if isinstance(record, SessionStart) and record.reason != "fresh":
        return [Event("restart", f"session {record.session} started after {record.reason}")]
    if isinstance(record, LoopDetected):
        action = LOOP_ACTIONS.get(record.level, f"level {record.level}")
        return [Event("loop", f"session {record.session} loops ({record.loop}): {action}")]
    if isinstance(record, Told):
        return [Event("told", "the operator's message was given to the agent")]
    if isinstance(record, Paused):
        return [Event("paused", f"run paused by {record.by}")]
    if isinstance(record, ServerStarted) and record.restart:
        return [Event("server_restart", f"the model server was started again (pid {record.pid})")]
    return []


class Hooks:
    """The `[hooks]` of a run as a journal sink (`attach`); `close` before the journal's."""

    def __init__(
        self,
        settings: HookSettings,
        state_dir: Path,
        now: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self.state_dir = str(state_dir)
        self.now = now
        self.outage = Outage(settings.waiting_after_min)
        self.last_run: dict[str, float] = {}
        self.skipped: dict[str, int] = {}
        self.running: list[threading.Thread] = []
        self.failures: SimpleQueue[str] = SimpleQueue()
        self.journal: Journal | None = None
        self.reporting = False
        self.told: set[str] = set()
        """The operator's messages given to the agent so far: one taken again (its session
        ended before a request the server accepted carried it) is no news."""

    def attach(self, journal: Journal) -> None:
        """Last of the journal's sinks: a warning it writes follows the record that made it
        in every other sink."""
        journal.sinks.append(self)
        self.journal = journal
        letters = journal.state.part(Letters)
        self.told = set(letters.delivered) | set(letters.undelivered)

    def __call__(self, record: JournalRecord, state: RunState) -> None:
        self.report_failures()
        if isinstance(record, Told):
            if record.message_id in self.told:
                return
            self.told.add(record.message_id)
        started: set[int] = set()
        for event in events_of(record, self.outage):
            # A hook runs once a record, on the most specific of its events (a run stopped as
            # stuck is one notification, not a `stuck` and a `run_end`).
            hooks = [
                (number, hook)
                for number, hook in enumerate(self.settings.on)
                if event.name in hook.events and number not in started
            ]
            if hooks and self.due(event.name):
                payload = self.payload(event, record, state)
                for number, hook in hooks:
                    started.add(number)
                    self.start(hook, event, payload)

    def due(self, name: str) -> bool:
        """Rate limit: one run of an event's hooks per `min_interval_s`, the rest counted."""
        now = self.now()
        last = self.last_run.get(name)
        if last is not None and now - last < self.settings.min_interval_s:
            self.skipped[name] = self.skipped.get(name, 0) + 1
            return False
        self.last_run[name] = now
        return True

    def payload(self, event: Event, record: JournalRecord, state: RunState) -> bytes:
        data: dict[str, Any] = {
            "event": event.name,
            "summary": event.summary,
            "ts": record.ts,
            "state_dir": self.state_dir,
            "session": state.session,
            "turns": state.total_turns,
            "skipped": self.skipped.pop(event.name, 0),
            # A session's opening (the system prompt...) is no news.
            "record": record.model_dump(mode="json", exclude={"messages"}),
        }
        return (json.dumps(data) + "\n").encode()

    def start(self, hook: HookCommand, event: Event, payload: bytes) -> None:
        self.running = [t for t in self.running if t.is_alive()]
        thread = threading.Thread(
            target=self.run, args=(hook, event, payload), name=f"hook {event.name}", daemon=True
        )
        thread.start()
        self.running.append(thread)

    def run(self, hook: HookCommand, event: Event, payload: bytes) -> None:
        """In the hook's thread: never raises, never writes the journal."""
        name = f"hook {hook.command[0]!r} on {event.name}"
        env = {
            **allowed_env(os.environ, self.settings.env),
            "OUROBOROS_EVENT": event.name,
            "OUROBOROS_SUMMARY": env_value(event.summary),
        }
        timeout = self.settings.timeout_s
        try:
            with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as errors:
                # A file, not a pipe: a hook that never reads it, or leaves a child holding it,
                # is done when it exits, whatever the payload's size.
                stdin.write(payload)
                stdin.seek(0)
                process = subprocess.Popen(
                    hook.command,
                    stdin=stdin,
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                    env=env,
                    # Its own process group: killed whole at its timeout, children too.
                    start_new_session=True,
                )
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    self.failures.put(f"{name}: killed after its timeout of {timeout:g}s")
                    return
                if process.returncode != 0:
                    errors.seek(0)
                    # One line: the warning is a line of the logs and of the terminal.
                    said = " ".join(errors.read(ERROR_BYTES).decode(errors="replace").split())
                    status = f"exit status {process.returncode}"
                    self.failures.put(f"{name} failed ({status})" + (f": {said}" if said else ""))
        except OSError as e:
            self.failures.put(f"{name}: cannot run: {e.strerror or e}")
        except ValueError as e:  # a NUL in the configured command (TOML has `\u0000`)
            self.failures.put(f"{name}: cannot run: {e}")

    def report_failures(self) -> None:
        """The failed hooks' warnings, into the journal (from the run's thread only)."""
        if self.journal is None or self.reporting:
            return
        self.reporting = True  # the warning's own record comes back here
        try:
            while True:
                try:
                    failure = self.failures.get_nowait()
                except Empty:
                    return
                self.journal.notify("warning", failure)
        finally:
            self.reporting = False

    def close(self) -> None:
        """Waits for the hooks still running, each bounded by its timeout (then killed), and
        journals how the last ones failed."""
        deadline = time.monotonic() + self.settings.timeout_s + GRACE_S
        for thread in self.running:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.report_failures()
