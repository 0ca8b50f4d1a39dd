"""The run's state as it stood right after a session start, so a resume folds only the records
of the last session.

Written at every session start, next to the journal: the session's own state is then its opening
messages, and the rest is the run's counters and ledger. It is a cache: missing, unreadable, or
not matching the journal's bytes at its offset, it is ignored and the whole journal is folded,
which gives the same state.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from pathlib import Path

from pydantic import BaseModel, ValidationError

from ouroboros.call_figures import RunLimits, WindowFigures
from ouroboros.context.view import ContextView
from ouroboros.context.winddown import RECENT
from ouroboros.jsonl import storage
from ouroboros.ledger import Ledger
from ouroboros.messages import Message
from ouroboros.records import RunEnd
from ouroboros.state import PrefillTally, RunState

SNAPSHOT_FORMAT = 3
"""3: with the run's call ids (an older snapshot is ignored: the whole journal is folded)."""


class Snapshot(BaseModel):
    format: int = SNAPSHOT_FORMAT
    offset: int
    """Bytes of the journal the state folds."""
    lines: int
    line_sha256: str
    """Of the journal's last line before `offset`: the journal this state belongs to."""
    line_bytes: int
    started_at: float | None
    session: int
    total_turns: int
    total_prompt_tokens: int
    total_completion_tokens: int
    restarts: int
    prefill: PrefillTally
    ledger: Ledger
    messages: list[Message]
    """The session's opening."""
    recent_replies: list[int]
    wind_down_reply_tokens: list[tuple[int, int]]
    run_end: RunEnd | None
    window: WindowFigures | None
    limits: RunLimits | None
    call_ids: list[str]


def snapshot_path(journal: Path) -> Path:
    return journal.with_name(journal.name + ".snapshot")


def save(journal: Path, state: RunState, offset: int, lines: int, last_line: bytes) -> None:
    """Replace the snapshot (atomically: a crash leaves the old one or the new one) with
    `state` as it is right after the session start record `last_line`."""
    snap = Snapshot(
        offset=offset,
        lines=lines,
        line_sha256=hashlib.sha256(last_line).hexdigest(),
        line_bytes=len(last_line),
        started_at=state.started_at,
        session=state.session,
        total_turns=state.total_turns,
        total_prompt_tokens=state.total_prompt_tokens,
        total_completion_tokens=state.total_completion_tokens,
        restarts=state.restarts,
        prefill=state.prefill,
        ledger=state.ledger,
        messages=state.view.history,
        recent_replies=list(state.recent_replies),
        wind_down_reply_tokens=state.wind_down_reply_tokens,
        run_end=state.run_end,
        window=state.window,
        limits=state.limits,
        call_ids=sorted(state.call_ids),
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
        return Snapshot.model_validate_json(snapshot_path(journal).read_bytes()).offset
    except (OSError, ValidationError):
        return None


def load(journal: Path) -> tuple[RunState, int, int] | None:
    """The state the snapshot holds, with the offset and line count it folds; None when there
    is none that belongs to this journal."""
    try:
        snap = Snapshot.model_validate_json(snapshot_path(journal).read_bytes())
        with journal.open("rb") as f:
            f.seek(max(0, snap.offset - snap.line_bytes))
            line = f.read(snap.line_bytes)
    except (OSError, ValidationError):
        return None
    if snap.format != SNAPSHOT_FORMAT or hashlib.sha256(line).hexdigest() != snap.line_sha256:
        return None
    state = RunState(
        started_at=snap.started_at,
        session=snap.session,
        session_open=True,
        total_turns=snap.total_turns,
        total_prompt_tokens=snap.total_prompt_tokens,
        total_completion_tokens=snap.total_completion_tokens,
        restarts=snap.restarts,
        prefill=snap.prefill,
        ledger=snap.ledger,
        view=ContextView(snap.messages),
        recent_replies=deque(snap.recent_replies, maxlen=RECENT),
        wind_down_reply_tokens=snap.wind_down_reply_tokens,
        run_end=snap.run_end,
        window=snap.window,
        limits=snap.limits,
        call_ids=set(snap.call_ids),
    )
    return state, snap.offset, snap.lines
