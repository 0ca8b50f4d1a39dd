"""Layer 1: cap a tool output on its way into the history, and cut it further where room is short.

Head and tail sizes depend only on the byte limit (a fixed allowance is kept for the marker), so
cutting an already capped text to a smaller limit keeps exactly what cutting the whole output
would have kept: a result stored at the run's normal cap can be shown shorter in a session that
is short of room, and whole again in the next one, from the stored text alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ouroboros.messages import ToolMessage

MARKER_ALLOWANCE = 240
"""Bytes a cap keeps for its marker: a path of ~100 bytes and the sentence around it."""
SAVED_FOLDER = ".outputs"
"""Workspace folder of whole outputs the model was shown cut, or that were masked."""
HEAD_SHARE = 0.4
"""Of what a cap keeps, the share taken from the start; the end (errors, summaries) gets more."""


@dataclass(frozen=True)
class Capped:
    text: str
    original_bytes: int
    kept_bytes: int

    @property
    def truncated(self) -> bool:
        return self.kept_bytes < self.original_bytes


def _head(data: bytes, size: int) -> str:
    # errors="ignore" drops the partial character a byte cut may leave at the edge.
    return data[:size].decode(errors="ignore")


def _tail(data: bytes, size: int) -> str:
    return data[len(data) - size :].decode(errors="ignore") if size else ""


def marker(cut_bytes: int, spill_path: str | None) -> str:
    where = (
        f" Full output: {spill_path} (read it with file_read offset/limit)." if spill_path else ""
    )
    return f"\n[... {cut_bytes:,} bytes cut ...{where}]\n"


def cap_output(
    text: str, max_bytes: int, spill_path: str | None = None, whole_bytes: int | None = None
) -> Capped:
    """Keep head and tail within `max_bytes`, with a marker in the middle saying what was cut.

    `spill_path` is where the full text was saved (inside the workspace), so the marker can
    tell the agent how to page through it. `whole_bytes` is the size of the output `text` was
    cut from, when `text` is itself a capped output: the marker then counts from the whole.
    """
    data = text.encode()
    whole = max(whole_bytes or 0, len(data))
    if len(data) <= max_bytes:
        return Capped(text, whole, len(data))
    room = max(0, max_bytes - MARKER_ALLOWANCE)
    head = _head(data, int(room * HEAD_SHARE))
    tail = _tail(data, room - int(room * HEAD_SHARE))
    kept = len(head.encode()) + len(tail.encode())
    result = head + marker(whole - kept, spill_path) + tail
    if len(result.encode()) > max_bytes:  # a limit below the marker allowance: the marker alone
        result = _head(marker(whole - kept, spill_path).encode(), max_bytes)
    return Capped(result, whole, len(result.encode()))


def shown(message: ToolMessage) -> ToolMessage:
    """The result as the model is shown it: its stored text, cut to `room_bytes` if the session
    it ran in (or the one it is carried into) had room for no more."""
    if message.room_bytes is None or message.masked:
        return message
    capped = cap_output(message.content, message.room_bytes, message.saved_to, message.output_bytes)
    return message.model_copy(update={"content": capped.text, "room_bytes": None})


def saved_name(tool: str, text: str) -> str:
    """Workspace path of a saved whole output, named by its content: one output, one file."""
    return f"{SAVED_FOLDER}/{hashlib.sha256(text.encode()).hexdigest()[:16]}-{tool}.txt"
