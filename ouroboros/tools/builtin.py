"""The built-in tools but `shell_exec` and `search_context`: the file tools, `plan`, `finish`.
Each takes validated arguments and returns text for the model."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from collections.abc import Iterator, Sequence

from pydantic import Field

from ouroboros.context.plan import PLAN_TOOL, PlanArgs, problem, saved
from ouroboros.ground.messages import AssistantMessage, Message, ToolCall, ToolMessage
from ouroboros.tools import safefs
from ouroboros.tools.abandonable import abandonable
from ouroboros.tools.tool import Output, Tool, ToolArgs, ToolContext, ToolFailed
from ouroboros.tools.workspace import Location, PathRefused, Workspace

READ_DEFAULT_LINES = 400
READ_MAX_BYTES = 1024 * 1024
"""A read stops after this much of the file, whatever `limit` says (the cap cuts it anyway)."""
COUNT_MAX_BYTES = 64 * 1024 * 1024
"""Files up to this size have their lines counted, to say how many there are in all."""
SKIP_MAX_BYTES = 64 * READ_MAX_BYTES
"""An offset further into a file than this is refused (shell_exec reads that deep): lines are
found by reading, and an offset into a huge or sparse file would read for minutes."""


@contextlib.contextmanager
def _told(loc: Location, missing: str) -> Iterator[None]:
    """A system error on `loc` as one line naming it (`missing` when it does not exist)."""
    try:
        yield
    except FileNotFoundError:
        raise ToolFailed(f"{missing}: {loc.shown}") from None
    except OSError as e:
        raise ToolFailed(f"{loc.shown}: {e.strerror or e}") from None


class FileReadArgs(ToolArgs):
    """Read a text file: `limit` lines from line `offset` (1-based)."""

    path: str
    offset: int = Field(1, ge=1)
    limit: int = Field(READ_DEFAULT_LINES, ge=1)


class FileRead(Tool):
    name, args = "file_read", FileReadArgs

    async def run(self, args: FileReadArgs, context: ToolContext) -> Output:
        return await abandonable(file_read, context.workspace, args)


def file_read(ws: Workspace, args: FileReadArgs) -> Output:
    """The asked lines, read as a stream: at most `READ_MAX_BYTES` of them, whatever the size
    of the file; the whole file is counted only where it is small enough to count quickly."""
    loc = ws.locate(args.path)
    with _told(loc, "no such file"):
        fd = safefs.open_regular(loc)
    first, kept, skipped, more, number = args.offset, 0, 0, False, 0
    chunk: list[bytes] = []
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if first > max(size, 1):  # every line takes a byte at least: this one cannot exist
            raise ToolFailed(f"{loc.shown} has no line {first:,}: it is {size:,} bytes long")
        # Lines longer than READ_MAX_BYTES come in pieces: memory stays bounded on any file.
        while line := f.readline(READ_MAX_BYTES):
            number += 1
            if number < first:
                skipped += len(line)
                if skipped > SKIP_MAX_BYTES:
                    raise ToolFailed(_too_deep(loc, first, args.limit))
                continue
            if len(chunk) == args.limit or kept > READ_MAX_BYTES:
                more = True
                break
            chunk.append(line)
            kept += len(line)
        total = None if more and size > COUNT_MAX_BYTES else _count(f, number, more)
    if not chunk and first > 1:
        raise ToolFailed(f"{loc.shown} has {number:,} lines; offset {first:,} is past its end")
    text = b"".join(chunk).decode(errors="replace").removesuffix("\n")
    last = first - 1 + len(chunk)
    if first > 1 or more:
        of = f"of {total:,}" if total is not None else f"of a {size:,}-byte file"
        text += f"\n[lines {first}-{last} {of}"
        text += f"; read more with offset={last + 1}]" if more else "]"
    return Output(text)


def _too_deep(loc: Location, first: int, limit: int) -> str:
    return (
        f"line {first:,} of {loc.shown} lies more than {SKIP_MAX_BYTES >> 20} MB into it; "
        f"read that deep with shell_exec: sed -n '{first},{first + limit - 1}p' {loc.shown}"
    )


def _count(f: io.BufferedReader, seen: int, more: bool) -> int:
    """Lines in all: those seen, and the rest of the file counted in blocks."""
    if not more:
        return seen
    count, last = seen, b"\n"
    for block in iter(lambda: f.read(1 << 20), b""):
        count, last = count + block.count(b"\n"), block[-1:]
    return count + (last != b"\n")  # a last line without its newline


class FileWriteArgs(ToolArgs):
    """Create or overwrite a text file (and its folders) with `content`."""

    path: str
    content: str


class FileWrite(Tool):
    name, args = "file_write", FileWriteArgs

    async def run(self, args: FileWriteArgs, context: ToolContext) -> Output:
        return await abandonable(file_write, context.workspace, args, context.seen)


def file_write(ws: Workspace, args: FileWriteArgs, seen: frozenset[str] = frozenset()) -> Output:
    """A file the agent has not read or written in this session is not replaced: a small model
    wrote over files it never read (its last result, a line of its instructions, "some text"),
    and any model writing a file whole should know what it replaces."""
    loc = ws.locate(args.path)
    if not loc.parts:
        raise ToolFailed(f"{loc.shown} is a folder")
    data = args.content.encode()
    # Written aside, then renamed: a crash mid-write never leaves the agent's notes half
    # written, and a failed write (a full disk) leaves neither a half file nor the one aside.
    with _told(loc, "no such folder"):
        # The instructions file is in every request's system message: seen.
        seen_here = ws.is_instructions(loc) or _among(loc, seen, ws)
        if seen_here and _holds(loc, data):
            # Said, not done again: a small model writes the file it was shown back unchanged,
            # and "wrote 194 bytes" told it nothing was wrong.
            return Output(f"{loc.shown} already holds exactly this text: nothing changed")
        written = safefs.replace_file(loc, data, overwrite=seen_here)
    if not written:
        raise ToolFailed(
            f"{loc.shown} exists and you have not read it in this session: read it with "
            "file_read first, then write it whole. Nothing was written"
        )
    return Output(f"wrote {len(data):,} bytes to {loc.shown}")


def _holds(loc: Location, data: bytes) -> bool:
    """The file at `loc` is a regular file holding exactly `data`."""
    try:
        fd = safefs.open_regular(loc)
    except (OSError, PathRefused):
        return False
    with os.fdopen(fd, "rb") as f:
        return os.fstat(fd).st_size == len(data) and f.read(len(data) + 1) == data


def _among(loc: Location, paths: frozenset[str], ws: Workspace) -> bool:
    """`loc` is one of `paths`, however each was written (`a.txt`, `./a.txt`, in full)."""
    for path in paths:
        with contextlib.suppress(PathRefused, ValueError):
            if ws.locate(path) == loc:
                return True
    return False


def files_seen(messages: Sequence[Message]) -> frozenset[str]:
    """The paths a `file_read` or `file_write` of these messages read or wrote (its result no
    error), as the calls wrote them."""
    calls = {
        c.id: c
        for m in messages
        if isinstance(m, AssistantMessage)
        for c in m.tool_calls
        if c.name in ("file_read", "file_write")
    }
    seen: set[str] = set()
    for m in messages:
        call = calls.get(m.tool_call_id) if isinstance(m, ToolMessage) and not m.error else None
        if call is None:
            continue
        with contextlib.suppress(ValueError, AttributeError):
            seen.add(str(json.loads(call.arguments).get("path")))
    return frozenset(seen)


class ListDirArgs(ToolArgs):
    """List a folder (the workspace without a path)."""

    path: str = "."


class ListDir(Tool):
    name, args = "list_dir", ListDirArgs

    async def run(self, args: ListDirArgs, context: ToolContext) -> Output:
        return await abandonable(list_dir, context.workspace, args)


def list_dir(ws: Workspace, args: ListDirArgs) -> Output:
    loc = ws.locate(args.path)
    with _told(loc, "not a folder"):
        found = safefs.entries(loc)
    lines = []
    for entry in found:
        if stat.S_ISDIR(entry.mode):
            lines.append(f"{entry.name}/")
        elif entry.target is not None:
            lines.append(f"{entry.name} -> {entry.target}  (a symbolic link: never followed)")
        else:
            lines.append(f"{entry.name}  {entry.size:,} bytes")
    return Output("\n".join(lines) or "(empty folder)")


class Plan(Tool):
    """Checked here, kept by the session: the result's record carries the plan."""

    name, args = PLAN_TOOL, PlanArgs

    async def run(self, args: PlanArgs, context: ToolContext) -> Output:
        if (wrong := problem(args.items, context.plan_cap)) is not None:
            raise ToolFailed(f"{wrong}. Nothing was changed")
        return Output(saved(args.items))


class FinishArgs(ToolArgs):
    """End the run when done."""

    summary: str = ""
    """Optional: a small model calls `finish` with no arguments, and a refusal for that is a
    loop (it calls it again, the same way). The description asks for none, in five words: the
    real small model copied "a summary of what was done" into it, and then "end the run for
    good, once the whole task is done", call after call."""


class Finish(Tool):
    name, args = "finish", FinishArgs

    async def run(self, args: FinishArgs, context: ToolContext) -> Output:
        return Output(f"run finished: {args.summary or 'no summary'}", finished=args.summary)


def finish_summary(call: ToolCall) -> str:
    """The summary of a finish call that ran (its arguments were valid then)."""
    return FinishArgs.model_validate_json(call.arguments).summary
