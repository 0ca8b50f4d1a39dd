"""The room a result is given is a bound: what the model is shown of it is never larger, even
for a cut a few bytes below its stored size (a stored cut is cut a little more then, never not
at all; a result stored whole is cut to the room itself)."""

from __future__ import annotations

import pytest

from ouroboros.context.truncate import RECUT_MIN, SNAP, cap_output, shown
from ouroboros.ground.messages import ToolCall, ToolMessage
from ouroboros.tools.results import shaped_result
from ouroboros.tools.tool import Output

DIGITS = "1,2,3,4,5,6,7,8,9,0\n" * 50
"""1,000 bytes of digits: about a token a byte."""
CALL = ToolCall(id="c1", name="shell_exec", arguments='{"command": "yes"}')


@pytest.mark.parametrize("room", [100, 300, 500, 700, 900, 999])
def test_a_result_is_shown_no_more_than_its_room(room: int) -> None:
    message = shaped_result(CALL, Output(DIGITS), cap=30_000, room=lambda text: room)
    seen = len(shown(message).content.encode())
    assert seen <= room, f"the room said {room} bytes, the model is shown {seen}"
    # Stored whole, it is cut to the room itself (its line ends aside): no more than it needs.
    assert seen >= room - 2 * SNAP, f"the room said {room} bytes, the model is shown {seen}"
    assert message.saved_to is not None  # the marker says where the whole text is


def test_a_recut_of_the_stored_text_keeps_what_a_cut_of_the_whole_keeps() -> None:
    """A stored result (cut at the cap) cut again for room a few bytes below its size: within
    the room, and the same text a cut of the whole output to that size shows."""
    whole = "".join(f"line {n}: {'word ' * (n % 17)}\n" for n in range(2000))
    spill = ".outputs/x-shell_exec.txt"
    stored = cap_output(whole, 4000, spill)
    message = ToolMessage(
        tool_call_id="c1",
        name="shell_exec",
        content=stored.text,
        output_bytes=len(whole.encode()),
        output_lines=len(whole.splitlines()),
        saved_to=spill,
    )
    for room in range(stored.kept_bytes - RECUT_MIN - 50, stored.kept_bytes, 37):
        seen = shown(message.model_copy(update={"room_bytes": room})).content
        assert len(seen.encode()) <= room, room
        same = cap_output(whole, min(room, stored.kept_bytes - RECUT_MIN), spill).text
        assert seen == same, room
