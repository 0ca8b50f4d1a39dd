"""Cap a tool output on its way into the history, and cut it further where room is short.

Head and tail sizes depend only on the byte limit (a fixed allowance is kept for the marker), so
cutting an already capped text to a smaller limit keeps exactly what cutting the whole output
would have kept: a result stored at the run's normal cap can be shown shorter in a session that
is short of room, and whole again in the next one, from the stored text alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from ouroboros.context.tokens import Calibration, output_kind, units
from ouroboros.ground.messages import ToolMessage

MARKER_ALLOWANCE = 240
"""Bytes a cap keeps for its marker: a path of ~100 bytes and the sentence around it."""
SAVED_FOLDER = ".outputs"
"""Workspace folder of whole outputs the model was shown cut, or that were masked."""
HEAD_SHARE = 0.4
"""Of what a cap keeps, the share taken from the start; the end (errors, summaries) gets more."""
SNAP = 120
"""How far a cut moves to fall at a line's end (a longer line is cut where it is)."""
RECUT_MIN = 2 * int(SNAP / HEAD_SHARE)
"""A room cut is at least this far below the stored text (see `shown`)."""


def recut_bytes(room_bytes: int, stored: int, whole: int) -> int:
    """Bytes a stored text of `stored` bytes, cut from an output of `whole`, is shown in a room of
    `room_bytes`: all of it where it fits; else the room, but where the stored text is itself a
    cut, at least `RECUT_MIN` below it (see `shown`): a little more is cut then, never less, as
    the room is a bound; at most down to the marker alone."""
    if room_bytes >= stored:
        return stored
    if stored >= whole:  # the whole output: its cut is the cut
        return room_bytes
    return min(room_bytes, max(stored - RECUT_MIN, MARKER_ALLOWANCE))


@dataclass(frozen=True)
class Capped:
    text: str
    original_bytes: int
    kept_bytes: int

    @property
    def truncated(self) -> bool:
        return self.kept_bytes < self.original_bytes


def _head(data: bytes, size: int) -> bytes:
    """The first `size` bytes, ended at a line's end when one is near (within `SNAP` bytes)."""
    head = data[:size]
    end = head.rfind(b"\n", max(0, size - SNAP))
    return head[: end + 1] if end >= 0 and size < len(data) else head


def _tail(data: bytes, size: int) -> bytes:
    """The last `size` bytes, begun at a line's start when one is near."""
    if size <= 0:
        return b""
    tail = data[len(data) - size :]
    start = tail.find(b"\n", 0, SNAP)
    return tail[start + 1 :] if start >= 0 and size < len(data) else tail


def _text(data: bytes) -> str:
    # errors="ignore" drops the partial character a byte cut may leave at an edge.
    return data.decode(errors="ignore")


def marker(cut_bytes: int, cut_lines: int, whole: tuple[int, int], spill: str | None) -> str:
    where = f" Full output: {spill} (read it with file_read offset/limit)." if spill else ""
    lines, size = whole
    return (
        f"\n[... {cut_lines:,} lines ({cut_bytes:,} bytes) cut of {lines:,} lines "
        f"({size:,} bytes) ...{where}]\n"
    )


def cap_output(
    text: str,
    max_bytes: int,
    spill_path: str | None = None,
    whole: tuple[int, int] | None = None,
) -> Capped:
    """Keep head and tail within `max_bytes`, cut at line ends where one is near, with a marker
    in the middle saying how many lines and bytes were cut of how many in all.

    `spill_path` is where the full text was saved (inside the workspace), so the marker can
    tell the agent how to page through it. `whole` is (lines, bytes) of the output `text` was
    cut from, when `text` is itself a capped output: the marker then counts from the whole.
    """
    data = text.encode()
    lines, size = whole or (len(text.splitlines()), len(data))
    size = max(size, len(data))
    if len(data) <= max_bytes:
        return Capped(text, size, len(data))
    room = max(0, max_bytes - MARKER_ALLOWANCE)
    # Whole characters only: what is counted as kept is what is shown.
    head = _text(_head(data, int(room * HEAD_SHARE))).encode()
    tail = _text(_tail(data, room - int(room * HEAD_SHARE))).encode()
    kept_lines = head.count(b"\n") + len(tail.splitlines())
    note = marker(size - len(head) - len(tail), lines - kept_lines, (lines, size), spill_path)
    result = _text(head) + note + _text(tail)
    if len(result.encode()) > max_bytes:  # a limit below the marker allowance: the marker alone
        result = _text(note.encode()[:max_bytes])
    return Capped(result, size, len(result.encode()))


FIT_TRIES = 4
"""Tries to cut a text to a price, each priced as cut: tokens per byte differ along an output (a
prose head, a tail of numbers), so a proportional cut may miss..."""
FIT_CLOSE = 0.95
"""...and a cut within this share of the price is close enough."""


def output_price(calibration: Calibration, text: str) -> Callable[[str], int]:
    """The price of `text`, or of what a cut keeps of it, as a result: pre-tokens at the ratio
    learnt for its kind of content, and the template's frame."""
    kind, frame = output_kind(text), round(calibration.frame)
    return lambda kept: calibration.tokens(units(kept), kind) + frame


def bytes_within(text: str, tokens: int, price: Callable[[str], int]) -> int:
    """The most bytes of `text` whose head and tail, as `cap_output` keeps them, cost at most
    `tokens`: all of it if it fits; else found proportionally to its density, priced again as
    cut (the marker costs too), a few times; at least the marker's allowance (the marker alone).
    Each try aims within the close-enough band, not at `tokens` itself: a cut denser than the
    whole (a head and tail of numbers around prose) approaches `tokens` from above, and aimed at
    it would miss on every try and keep the marker alone."""
    size = len(text.encode())
    fitting, cost = size, price(text)
    best = size if cost <= tokens else MARKER_ALLOWANCE
    aim = max(tokens, 0) * (1 + FIT_CLOSE) / 2
    for _ in range(FIT_TRIES):
        if cost <= tokens and (fitting == size or cost >= FIT_CLOSE * tokens):
            break
        fitting = min(size - 1, int(fitting * aim / max(cost, 1)))
        if fitting <= MARKER_ALLOWANCE:
            break
        cost = price(cap_output(text, fitting).text)
        if cost <= tokens:
            best = max(best, fitting)
    return best


def capped_bytes(calibration: Calibration, tokens: int, text: str) -> int:
    """Bytes of a tool's output its cap keeps: what costs at most `tokens` as the harness prices
    content, so an output of digits (about a token a byte) and one of prose (about four bytes a
    token) of the same size in tokens are cut alike."""
    return bytes_within(text, tokens, output_price(calibration, text))


def shown(message: ToolMessage) -> ToolMessage:
    """The result as the model is shown it: its stored text, cut to `room_bytes` if the session
    it ran in (or the one it is carried into) had room for no more. A cut of a stored text that
    is itself a cut is at least `RECUT_MIN` bytes below it (`recut_bytes`): only so is what a cut
    of the stored text keeps the same as what a cut of the whole output keeps (line ends move
    head and tail by at most `SNAP` bytes)."""
    if message.room_bytes is None or message.masked:
        return message
    stored = len(message.content.encode())
    lines = message.output_lines
    size = stored if message.output_bytes is None else message.output_bytes
    kept = recut_bytes(message.room_bytes, stored, size)
    if kept >= stored:
        return message.model_copy(update={"room_bytes": None})
    whole = (len(message.content.splitlines()) if lines is None else lines, size)
    capped = cap_output(message.content, kept, message.saved_to, whole)
    return message.model_copy(update={"content": capped.text, "room_bytes": None})


def saved_name(tool: str, text: str) -> str:
    """Workspace path of a saved whole output, named by its content: one output, one file."""
    return f"{SAVED_FOLDER}/{hashlib.sha256(text.encode()).hexdigest()[:16]}-{tool}.txt"
