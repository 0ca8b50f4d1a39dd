"""`python -m ouroboros task add | list | import`: the operator's tasks left for the run
(`tasks.py`), and listed with where each stands (the journal folded, and the files not yet
taken): each task's standing in the words `status` and the report use."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ouroboros.ground.printable import printable
from ouroboros.observe.describe import stdout_console
from ouroboros.operator.inbox import NotAMessage
from ouroboros.progress import tasks
from ouroboros.progress.records import Task
from ouroboros.progress.standing import counted, waiting
from ouroboros.progress.view import folded


def task_command(
    state_dir: Path, args: argparse.Namespace, console: Console, when: Callable[[Path], str]
) -> int:
    if args.task_command == "list":
        return task_list(state_dir)
    if args.task_command == "add":
        found = [Task(text=args.text.strip(), check=args.check.strip())]
    else:
        found = tasks.parse(args.file)
    tasks.post(state_dir, found)
    console.print(f"{len(found):,} task(s) kept: the run takes them {when(state_dir)}")
    return 0


def task_list(state_dir: Path) -> int:
    out = stdout_console()
    progress = folded(state_dir)
    for n, task in enumerate(progress.tasks, 1):
        standing = progress.items[f"T{n}"]
        said = f"T{n} [{standing.standing}] {task.text}" + (
            f"  check: {task.check}" if task.check else ""
        )
        out.print(escape(printable(said)), soft_wrap=True)
    pending = 0
    for source in waiting(state_dir):
        try:
            for task in tasks.read(state_dir, source):
                pending += 1
                said = f"(pending) {task.text}" + (f"  check: {task.check}" if task.check else "")
                out.print(escape(printable(said)), soft_wrap=True)
        except (FileNotFoundError, NotAMessage):
            continue
    counts = progress.status()["progress"]
    line = counted(
        progress.passing, len(progress.items), counts["failing_count"], counts["unchecked"]
    )
    out.print(f"{line}; {pending:,} pending")
    return 0
