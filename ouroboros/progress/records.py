"""The records of checked progress (`checks.py`): the operator's tasks taken, each check run,
a stall told; and what the run knows of them (`Progress`, the feature's part of the state).

An item is named by a key: `T<n>` for the operator's n-th task, the text of the step for the
agent's own. A step whose text begins `T<n>` names that task, whether or not it is there yet,
and is never an item of its own: the two kinds of key cannot meet. An item passes while its
newest check exited 0, fails once one did not, and is not checked yet before any."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ouroboros.context.plan import PlanItem
from ouroboros.progress.standing import NOT_CHECKED
from ouroboros.state.fold import Part, RunState
from ouroboros.state.records import Record, SessionEnd

FAILING_SAID = 5
"""Failing items `status` names: the first few, then a count."""
TASK_REF = re.compile(r"T(\d+)\b")
"""How the agent names the operator's task in a step of its plan: `T12 parse dates`."""


def named_task(text: str) -> str | None:
    """The key of the operator's task a step's text names (`T12 parse dates`: `T12`), whether
    or not that task is there yet."""
    found = TASK_REF.match(text)
    return f"T{int(found.group(1))}" if found else None


class Task(BaseModel):
    """One of the operator's items: the agent passes it only by its check."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    text: str
    check: str = ""


class TasksAdded(Record):
    """Tasks `python -m ouroboros task add` or `task import` left, taken by the run; they are
    numbered in the order taken, after those before."""

    kind: Literal["tasks_added"] = "tasks_added"
    source: str
    """The file they came in (its name less its suffix): taken once."""
    tasks: list[Task]

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        first = self.tasks[0].text if self.tasks else ""
        return [("tasks_added", {"count": len(self.tasks), "first": first[:120]})]


When = Literal["done", "session_end", "finish", "write"]
"""Marked done by the agent, checked as a session ended, or as the agent called `finish`."""


class CheckRun(Record):
    """One run of an item's check, confined as `shell_exec` is."""

    kind: Literal["check"] = "check"
    session: int
    item: str
    """Its key (`T<n>`, or the agent's step)."""
    command: str
    exit_code: int | None
    """None: it never ran (refused, or it could not start); -9 where it timed out."""
    tail: str
    """The end of what it printed, or why it never ran."""
    when: When

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def output(self) -> str:
        """The end of what it printed, without the exit code `shell_exec` puts before it."""
        return self.tail.removeprefix(f"exit code {self.exit_code}").strip()

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        said = self.model_dump(include={"session", "item", "command", "exit_code", "when"})
        last = self.tail.strip().splitlines()[-1:] or [""]
        return [("check", {**said, "passed": self.passed, "last": last[0][:200]})]


class Stalling(Record):
    """Sessions in a row passed no new check: the agent is told in the next opening."""

    kind: Literal["stalling"] = "stalling"
    session: int
    sessions: int
    failing: list[str]

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [("stalling", self.model_dump(include={"session", "sessions", "failing"}))]


@dataclass
class ItemState:
    passing: bool = False
    checked_ts: str = ""
    judged: int = 0
    """Which of the run's checks judged it last, counted from 1 (0: none yet): the session
    end's share re-checks those judged longest ago."""
    first_pass: str = ""
    first_pass_session: int = 0
    regressions: int = 0
    last: str = ""
    """The newest failing check's exit and last line ("" while it passes)."""

    @property
    def standing(self) -> str:
        """What every view says of it: passes, fails, or not checked yet."""
        if self.passing:
            return "passes"
        return "fails" if self.judged else NOT_CHECKED


@dataclass
class Progress(Part):
    """The operator's tasks, every checked item's standing, and the sessions since a check
    last newly passed."""

    folds = (TasksAdded, CheckRun, Stalling, SessionEnd)

    tasks: list[Task] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)
    items: dict[str, ItemState] = field(default_factory=dict)
    """Every checked item the run knows, by key: the operator's from when they are taken, the
    agent's from their first check or the session end after they were planned."""
    passing: int = 0
    checked_ts: str = ""
    judged: int = 0
    """Checks run in the run."""
    by_session: list[tuple[int, str, int, int]] = field(default_factory=list)
    """(session, when, passing, items) as each session's newest check or end left them: the
    report's burn-up."""
    quiet: int = 0
    """Sessions ended in a row with checked items failing and no new pass."""
    passed_this_session: bool = False
    regressed: list[str] = field(default_factory=list)
    """Items found failing at the newest session end that passed before: the next opening
    says so."""
    stalling: Stalling | None = None

    def apply(self, record: Record, state: RunState) -> None:
        if isinstance(record, TasksAdded):
            if record.source in self.sources:
                return
            self.sources.add(record.source)
            for task in record.tasks:
                self.tasks.append(task)
                # A journal written before the keys were kept apart may hold a step's check under
                # this key: its standing was the step's, not the task's.
                if (was := self.items.get(f"T{len(self.tasks)}")) is not None and was.passing:
                    self.passing -= 1
                self.items[f"T{len(self.tasks)}"] = ItemState()
        elif isinstance(record, CheckRun):
            self.checked(record)
            if not record.passed and record.when != "done":
                # Done only while its check passes: the step the agent marked done is doing again
                # (one marked done and failing was saved doing).
                state.plan.items = [
                    i.model_copy(update={"status": "doing"})
                    if i.status == "done" and record.item in (i.text, named_task(i.text))
                    else i
                    for i in state.plan.items
                ]
        elif isinstance(record, Stalling):
            self.stalling = record
        elif isinstance(record, SessionEnd):
            self.session_ended(state)
            self.point(record.session, record.ts)

    def session_ended(self, state: RunState) -> None:
        steps = {i.text for i in state.plan.items if i.check and named_task(i.text) is None}
        for text in steps:
            self.items.setdefault(text, ItemState())
        # A failing step the agent dropped from its plan is no longer its to pass (nor does
        # `finish` wait for it): it counts for no stall. One that passed stays achieved.
        for key in [k for k, i in self.items.items() if not i.passing and k not in steps]:
            if self.task(key) is None:
                del self.items[key]
        # A stall is items still failing and none newly passing: with all passing, nothing is
        # left to pass.
        failing = any(not item.passing for item in self.items.values())
        if failing and not self.passed_this_session:
            self.quiet += 1
        self.passed_this_session = False
        self.regressed = []

    def checked(self, record: CheckRun) -> None:
        item = self.items.setdefault(record.item, ItemState())
        self.checked_ts = item.checked_ts = record.ts
        self.judged += 1
        item.judged = self.judged
        if record.passed and not item.passing:
            self.passing += 1
            self.quiet, self.stalling = 0, None
            # One found at a session's end counts for the one that ended (already counted).
            self.passed_this_session = record.when != "session_end"
            if not item.first_pass:
                item.first_pass, item.first_pass_session = record.ts, record.session
        elif not record.passed and item.passing:
            self.passing -= 1
            item.regressions += 1
            if record.when == "session_end":
                self.regressed.append(record.item)
        item.passing = record.passed
        item.last = "" if record.passed else reason(record)
        self.point(record.session, record.ts)

    def point(self, session: int, ts: str) -> None:
        """The burn-up's point for `session`, as it stands now."""
        now = (session, ts, self.passing, len(self.items))
        if self.by_session and self.by_session[-1][0] == session:
            self.by_session[-1] = now
        else:
            self.by_session.append(now)

    def task(self, key: str) -> Task | None:
        """The operator's task `key` names (`T<n>`), if any."""
        if not (key.startswith("T") and key[1:].isdecimal()):
            return None
        n = int(key[1:])
        return self.tasks[n - 1] if 0 < n <= len(self.tasks) else None

    def task_key(self, item: PlanItem) -> str | None:
        """The operator's task a step of the agent's plan names, if it is there."""
        key = named_task(item.text)
        return key if key is not None and self.task(key) is not None else None

    def not_passing(self) -> list[str]:
        """Every checked item that does not pass now (failing, or not checked yet), in the
        order known."""
        return [key for key, item in self.items.items() if not item.passing]

    def status(self) -> dict[str, Any]:
        """Passing of total, those failing (the first few) and not checked yet, when last
        checked, the stall."""
        failing: list[str] = []
        failing_count = unchecked = 0
        for key, item in self.items.items():
            if item.passing:
                continue
            if not item.judged:
                unchecked += 1
                continue
            failing_count += 1
            if len(failing) < FAILING_SAID:
                failing.append(key)
        return {
            "progress": {
                "passing": self.passing,
                "total": len(self.items),
                "checked": self.checked_ts,
                "failing": failing,
                "failing_count": failing_count,
                "unchecked": unchecked,
                "quiet": self.quiet,
            }
        }


def reason(ran: CheckRun) -> str:
    """Why a check failed, in a few words: its exit and the last line it printed."""
    if ran.exit_code is None:
        return f"could not run: {last_line(ran.tail)}"
    if ran.exit_code == -9:
        return "timed out"
    return f"exit {ran.exit_code}" + (f": {last_line(ran.output)}" if ran.output else "")


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else "(no output)"
