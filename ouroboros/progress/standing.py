"""Checked progress as `status` says it without the run's state, light to import (`status`
imports it every time): an item's standing in the words every view says it in (passes, fails,
not checked yet), the items counted, and the operator's task files not yet taken."""

from __future__ import annotations

from pathlib import Path

from ouroboros.ground.state_folder import TASKS
from ouroboros.operator.inbox import listed

NOT_CHECKED = "not checked yet"
"""An item no check has judged yet: neither passing nor failing."""
SUFFIX = ".json"
"""Of a file of tasks in the state folder's `TASKS` (`tasks.post`)."""


def counted(passing: int, total: int, failing: int, unchecked: int) -> str:
    """How many items pass, fail and are not checked yet, as `status` and `task list` say it."""
    said = f"{passing:,} of {total:,} checked items pass"
    if failing:
        said += f", {failing:,} fail"
    if unchecked:
        said += f", {unchecked:,} {NOT_CHECKED}"
    return said


def standing(word: str, last: str) -> str:
    """An item's standing with why it fails (its exit and last line)."""
    return f"{word} ({last})" if word == "fails" and last else word


def waiting(state_dir: Path) -> list[str]:
    """The files of tasks not yet taken, oldest first."""
    return listed(state_dir / TASKS, SUFFIX)
