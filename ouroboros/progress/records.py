"""The records of checked progress (`checks.py`): the operator's tasks taken, each check run,
a stall told; and what the run knows of them (`Progress`, the feature's part of the state).

An item is named by a key: `T<n>` for the operator's n-th task, the text of the step for the
agent's own. It passes while its newest check exited 0."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ouroboros.context.plan import PlanItem
from ouroboros.state.fold import Part, RunState
from ouroboros.state.records import Record, SessionEnd

FAILING_SAID = 5
"""Failing items `status` and a refused `finish` name: the first few, then a count."""
TASK_REF = re.compile(r"T\d+\b")
"""How the agent names the operator's task in a step of its plan: `T12 parse dates`."""


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
    when: Literal["done", "session_end"]
    """Marked done by the agent, or checked again as a session ended."""

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

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
    first_pass: str = ""
    first_pass_session: int = 0
    regressions: int = 0
    last: str = ""
    """The newest failing check's exit and last line ("" while it passes)."""


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
                self.items[f"T{len(self.tasks)}"] = ItemState()
        elif isinstance(record, CheckRun):
            self.checked(record)
            if not record.passed and record.when == "session_end":
                # Done only while its check passes: the step the agent marked done is doing again.
                state.plan.items = [
                    i.model_copy(update={"status": "doing"})
                    if i.status == "done" and record.item in (i.text, self.task_key(i))
                    else i
                    for i in state.plan.items
                ]
        elif isinstance(record, Stalling):
            self.stalling = record
        elif isinstance(record, SessionEnd):
            self.session_ended(state)

    def session_ended(self, state: RunState) -> None:
        steps = {i.text for i in state.plan.items if i.check and self.task_key(i) is None}
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
        if record.passed and not item.passing:
            self.passing += 1
            self.quiet, self.stalling = 0, None
            # One found at a session's end counts for the one that ended (already counted).
            self.passed_this_session = record.when == "done"
            if not item.first_pass:
                item.first_pass, item.first_pass_session = record.ts, record.session
        elif not record.passed and item.passing:
            self.passing -= 1
            item.regressions += 1
            if record.when == "session_end":
                self.regressed.append(record.item)
        item.passing = record.passed
        item.last = "" if record.passed else f"exit {record.exit_code}: {last_line(record.tail)}"

    def task(self, key: str) -> Task | None:
        """The operator's task `key` names (`T<n>`), if any."""
        if not (key.startswith("T") and key[1:].isdecimal()):
            return None
        n = int(key[1:])
        return self.tasks[n - 1] if 0 < n <= len(self.tasks) else None

    def task_key(self, item: PlanItem) -> str | None:
        """The operator's task a step of the agent's plan names, if any."""
        found = TASK_REF.match(item.text)
        return found.group() if found and self.task(found.group()) is not None else None

    def failing(self) -> list[str]:
        """Every checked item that does not pass now, in the order known."""
        return [key for key, item in self.items.items() if not item.passing]

    def status(self) -> dict[str, Any]:
        """Passing of total, when last checked, the first few failing, the stall."""
        failing = []
        for key, item in self.items.items():
            if not item.passing:
                failing.append(key)
                if len(failing) == FAILING_SAID:
                    break
        return {
            "progress": {
                "passing": self.passing,
                "total": len(self.items),
                "checked": self.checked_ts,
                "failing": failing,
                "quiet": self.quiet,
            }
        }


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else "(no output)"
