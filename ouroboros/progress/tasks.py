"""The operator's tasks on their way to the run: `task add` and `task import` leave one file of
tasks in the state folder, durable the moment the command returns, whether a run is up or not
(as `tell` leaves a message: `operator/inbox.py`); the run takes each file at its next safe
point by journalling it (`TasksAdded`) and removing the file after, so a kill between the two
neither loses nor repeats a task. A file that is not one `task` wrote is set aside, not read.

`parse` reads an import file (TOML `[[task]]` tables, or JSONL), each problem one line naming
where it is."""

from __future__ import annotations

import json
import secrets
import time
import tomllib
from pathlib import Path

from pydantic import ValidationError

from ouroboros.context.plan import CHECK_CHARS
from ouroboros.ground.errors import ConfigError, RunError
from ouroboros.ground.state_folder import TASKS
from ouroboros.operator.inbox import (
    NotAMessage,
    leave,
    read_in,
    read_regular,
    remove_in,
    set_aside_in,
)
from ouroboros.progress.records import Task
from ouroboros.progress.standing import SUFFIX

TEXT_CHARS = 500
"""A task is a line of work; the agent is shown its first `plan.TEXT_CHARS`."""
MAX_TASKS = 100_000
MAX_FILE_BYTES = 64 * 1024 * 1024


def problem(task: Task) -> str | None:
    """What is wrong with a task, in a few words; None if fine."""
    if not task.text.strip():
        return "the task has no text"
    if not task.check.strip():
        return (
            "the task has no check: give a command that exits 0 once it is done (--check; "
            "guidance without one goes by `tell`)"
        )
    for name, value, most in (("text", task.text, TEXT_CHARS), ("check", task.check, CHECK_CHARS)):
        if "\n" in value or "\r" in value:
            return f"its {name} has a line break: one line each"
        if len(value) > most:
            return f"its {name} is {len(value)} characters, at most {most}"
    return None


def post(state_dir: Path, tasks: list[Task]) -> str:
    """Leave `tasks` for the run: written whole under a temporary name, fsync'ed, renamed into
    place, the folder fsync'ed: there whole or not at all. The file's id."""
    if not tasks:
        raise RunError("no task given: say one, or import a file of them")
    if len(tasks) > MAX_TASKS:
        raise RunError(f"{len(tasks):,} tasks, at most {MAX_TASKS:,} at once: split the file")
    for n, task in enumerate(tasks, 1):
        if (wrong := problem(task)) is not None:
            raise RunError(f"task {n}: {wrong}" if len(tasks) > 1 else wrong)
    source = f"{time.time_ns():020d}-{secrets.token_hex(4)}"
    body = json.dumps([t.model_dump() for t in tasks]).encode()
    leave(state_dir / TASKS, f"{source}{SUFFIX}", body)
    return source


def read(state_dir: Path, source: str) -> list[Task]:
    """The tasks of file `source`; `NotAMessage` if it is not one `post` wrote."""
    data = read_in(state_dir / TASKS, f"{source}{SUFFIX}", MAX_FILE_BYTES)
    try:
        tasks = [Task.model_validate(t) for t in json.loads(data)]
    except (ValueError, TypeError, ValidationError, RecursionError):  # nested past the parser
        raise NotAMessage("not tasks `task` wrote") from None
    if len(tasks) > MAX_TASKS or any(problem(t) for t in tasks):
        raise NotAMessage("not tasks `task` wrote")
    return tasks


def reject(state_dir: Path, source: str) -> None:
    set_aside_in(state_dir / TASKS, f"{source}{SUFFIX}")


def remove(state_dir: Path, source: str) -> None:
    remove_in(state_dir / TASKS, f"{source}{SUFFIX}")


def parse(path: Path) -> list[Task]:
    """The tasks of an import file: TOML (`[[task]]` with `text` and `check`) when it ends in
    `.toml`, else JSONL (one `{"text": ..., "check": ...}` a line); `ConfigError` names the
    line of the first problem."""
    try:
        raw = read_regular(path, MAX_FILE_BYTES, follow=True).decode()
    except (OSError, UnicodeDecodeError) as e:
        raise RunError(
            f"cannot read {path}: {getattr(e, 'strerror', None) or 'not UTF-8'}"
        ) from None
    except NotAMessage as e:
        raise RunError(f"cannot read {path}: it is {e}") from None
    if path.suffix == ".toml":
        return _toml(path, raw)
    tasks = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            tasks.append(_task(json.loads(line)))
        except (ValueError, TypeError, ValidationError, RecursionError) as e:
            raise ConfigError(f"{path}, line {number}: {_said(e)}") from None
    return tasks


def _toml(path: Path, raw: str) -> list[Task]:
    try:
        tables = tomllib.loads(raw).get("task", [])
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        raise ConfigError(f"{path}: {_said(e)}") from None
    if not isinstance(tables, list):
        raise ConfigError(f"{path}: `task` must be [[task]] tables, each with text and check")
    tasks = []
    for n, table in enumerate(tables, 1):
        try:
            tasks.append(_task(table))
        except (ValueError, TypeError, ValidationError) as e:
            raise ConfigError(f"{path}, task {n}: {_said(e)}") from None
    return tasks


def _task(raw: object) -> Task:
    if not isinstance(raw, dict):
        raise TypeError('each task is an object: {"text": "...", "check": "command"}')
    task = Task.model_validate({"text": raw.get("text"), "check": raw.get("check") or ""})
    if (wrong := problem(task)) is not None:
        raise ValueError(wrong)
    return task


def _said(e: Exception) -> str:
    if isinstance(e, RecursionError):
        return "nested too deep to read"
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
    return str(e).splitlines()[0]
