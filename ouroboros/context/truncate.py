"""Layer 1: cap a tool output on its way into the history."""

from __future__ import annotations

from dataclasses import dataclass


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


def cap_output(text: str, max_bytes: int, spill_path: str | None = None) -> Capped:
    """Keep head and tail within `max_bytes`, with a marker in the middle saying what was cut.

    `spill_path` is where the full text was saved (inside the workspace), so the marker can
    tell the agent how to page through it.
    """
    data = text.encode()
    if len(data) <= max_bytes:
        return Capped(text, len(data), len(data))
    where = (
        f" Full output: {spill_path} (read it with file_read offset/limit)." if spill_path else ""
    )
    marker_len = len(f"\n[... {len(data):,} bytes cut ...{where}]\n".encode()) + 8
    room = max(0, max_bytes - marker_len)
    head = _head(data, room * 2 // 5)
    tail = _tail(data, room - len(head.encode()))
    cut = len(data) - len(head.encode()) - len(tail.encode())
    marker = f"\n[... {cut:,} bytes cut ...{where}]\n"
    result = head + marker + tail
    return Capped(result, len(data), len(result.encode()))
