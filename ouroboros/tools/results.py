"""A tool's result as the model is shown it: capped, cut to the room left, and its whole output
saved under `workspace/.outputs/` wherever what is shown says it was cut or masked."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ouroboros.context.truncate import cap_output, recut_bytes, saved_name
from ouroboros.ground.messages import ToolCall, ToolMessage
from ouroboros.tools import safefs
from ouroboros.tools.abandonable import abandonable
from ouroboros.tools.tool import Output
from ouroboros.tools.workspace import PathRefused, Workspace

Fit = Callable[[str], int]
"""Bytes of this text that fit: the room left for it, or a cap in tokens."""


def shaped_result(
    call: ToolCall, output: Output, cap: int, room: Fit | None, token_cap: Fit | None = None
) -> ToolMessage:
    """The result at the normal cap: `cap` bytes, and within them what `token_cap` keeps (the cap
    in tokens, `truncate.capped_bytes`); `room_bytes` when the room left shows less; the whole
    output to be saved (`saved_to`) whenever what the model is shown is cut, but a file's."""
    text = output.text
    size = len(text.encode())
    capped = cap_output(text, cap)
    if token_cap is not None:
        cap = min(cap, token_cap(capped.text))
        capped = cap_output(text, cap)
    fits = room(capped.text) if room else capped.kept_bytes
    shown_bytes = recut_bytes(fits, capped.kept_bytes, size)
    # A file read is read again from the file (its range of lines says how): no copy of it.
    cut = size > shown_bytes and call.name != "file_read"
    saved_to = saved_name(call.name, text) if cut else None
    if saved_to is not None:
        capped = cap_output(text, cap, saved_to)
    return ToolMessage(
        tool_call_id=call.id,
        name=call.name,
        content=capped.text,
        exit_code=output.exit_code,
        arguments=call.arguments,
        output_bytes=size,
        output_lines=len(text.splitlines()),
        saved_to=saved_to,
        room_bytes=shown_bytes if shown_bytes < capped.kept_bytes else None,
    )


async def spill(workspace: Workspace, relative: str, text: str) -> None:
    """Write a whole output into the workspace where the agent can page through it. The journal
    keeps the result at the cap whatever happens here: where a planted link or folder is in the
    way, or the disk is full, nothing is written (it costs the agent the whole text, not the
    run)."""
    await abandonable(_spill, workspace, relative, text)


def _spill(workspace: Workspace, relative: str, text: str) -> None:
    with contextlib.suppress(OSError, PathRefused):
        safefs.create_file(workspace.locate(relative), text.encode())
