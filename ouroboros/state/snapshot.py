"""The run's state as it stood right after a session start, so a resume folds only the records
of the last session.

Written at every session start, next to the journal: the session's own state is then its opening
messages, and the rest is the run's fields of `RunState`, saved by their one declaration there,
and the features' parts whole.
It is a cache: missing, unreadable, or not matching the journal's bytes at its offset, it is
ignored and the whole journal is folded, which gives the same state.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any, get_type_hints

from pydantic import BaseModel, ValidationError, create_model

from ouroboros.context.view import ContextView
from ouroboros.ground.jsonl import storage
from ouroboros.ground.messages import Message
from ouroboros.state.fold import RunState, parts

SNAPSHOT_FORMAT = 5
"""5: the features' parts by name (an older snapshot is ignored: the whole journal is
folded)."""


class Saved(BaseModel):
    format: int = SNAPSHOT_FORMAT
    shape: str = ""
    """`shape()` when it was written: another (a field a part gained since) is ignored, rather
    than loaded with that field's default."""
    offset: int
    """Bytes of the journal the state folds."""
    lines: int
    line_sha256: str
    """Of the journal's last line before `offset`: the journal this state belongs to."""
    line_bytes: int
    messages: list[Message]
    """The session's opening."""


RUN_FIELDS = [f.name for f in fields(RunState) if not f.metadata.get("session")]
"""The run's fields of `RunState`: every one not reset by a session start."""
RUN_FIELDS.remove("parts")


@cache
def shape(saved: tuple[type, ...]) -> str:
    """The names of what a snapshot saves: the run's fields, and each of the `saved` parts'."""
    names = [*RUN_FIELDS, *(f"{part.__name__}.{f.name}" for part in saved for f in fields(part))]
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


@cache
def snapshot_model(saved: tuple[type, ...]) -> type[Saved]:
    """A snapshot with the run's fields of `RunState` and the features' `saved` parts (those
    registered: a feature loaded later makes another)."""
    hints = get_type_hints(RunState)
    run: dict[str, Any] = {name: (hints[name], ...) for name in RUN_FIELDS}
    run |= {part.__name__: (part, ...) for part in saved}
    saved_run = create_model("SavedRun", **run)
    return create_model("Snapshot", __base__=Saved, run=(saved_run, ...))


def snapshot_path(journal: Path) -> Path:
    return journal.with_name(journal.name + ".snapshot")


def save(journal: Path, state: RunState, offset: int, lines: int, last_line: bytes) -> None:
    """Replace the snapshot (atomically: a crash leaves the old one or the new one) with
    `state` as it is right after the session start record `last_line`."""
    run: dict[str, Any] = {name: getattr(state, name) for name in RUN_FIELDS}
    snap = snapshot_model(parts())(
        shape=shape(parts()),
        offset=offset,
        lines=lines,
        line_sha256=hashlib.sha256(last_line).hexdigest(),
        line_bytes=len(last_line),
        run=run | state.parts,
        messages=state.view.history,
    )
    path = snapshot_path(journal)
    temporary = path.with_name(path.name + ".tmp")
    # A snapshot that cannot be written stops the run like any file of the state folder (the
    # session start it follows is on disk: nothing is lost).
    with storage(path):
        temporary.write_text(snap.model_dump_json())
        os.replace(temporary, path)


def journal_size_then(journal: Path) -> int | None:
    """The journal's length when its snapshot was taken (None: no snapshot that reads). The
    journal only grows (a torn tail set aside is past the snapshot's last whole line), so a
    shorter one lost records."""
    try:
        return Saved.model_validate_json(snapshot_path(journal).read_bytes()).offset
    except (OSError, ValidationError):
        return None


def load(journal: Path) -> tuple[RunState, int, int] | None:
    """The state the snapshot holds, with the offset and line count it folds; None when there
    is none that belongs to this journal."""
    try:
        snap = snapshot_model(parts()).model_validate_json(snapshot_path(journal).read_bytes())
        with journal.open("rb") as f:
            f.seek(max(0, snap.offset - snap.line_bytes))
            line = f.read(snap.line_bytes)
    except (OSError, ValidationError):
        return None
    if (snap.format, snap.shape) != (SNAPSHOT_FORMAT, shape(parts())):
        return None
    if hashlib.sha256(line).hexdigest() != snap.line_sha256:
        return None
    run = {name: getattr(snap.run, name) for name in RUN_FIELDS}  # type: ignore[attr-defined]
    kept = {part.__name__: getattr(snap.run, part.__name__) for part in parts()}  # type: ignore[attr-defined]
    state = RunState(**run, parts=kept, session_open=True, view=ContextView(snap.messages))
    return state, snap.offset, snap.lines
