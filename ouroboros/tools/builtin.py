"""The built-in tools. Each takes validated arguments and returns text for the model."""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ouroboros.tools.workspace import Workspace

READ_DEFAULT_LINES = 400
READ_MAX_BYTES = 1024 * 1024
"""A read stops after this much of the file, whatever `limit` says (the cap cuts it anyway)."""
COUNT_MAX_BYTES = 64 * 1024 * 1024
"""Files up to this size have their lines counted, to say how many there are in all."""


class ToolFailed(Exception):
    """The tool could not do what was asked; the message goes back to the model."""


@dataclass(frozen=True)
class Output:
    text: str
    exit_code: int | None = None


class ToolArgs(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class FileReadArgs(ToolArgs):
    """Read a text file, optionally a window of lines (1-based offset)."""

    path: str = Field(description="File path, relative to the workspace")
    offset: int = Field(1, ge=1, description="First line to read (1-based)")
    limit: int = Field(READ_DEFAULT_LINES, ge=1, description="How many lines to read")


class FileWriteArgs(ToolArgs):
    """Create or overwrite a text file (parent folders are created)."""

    path: str = Field(description="File path, relative to the workspace")
    content: str = Field(description="The whole new content of the file")


class ListDirArgs(ToolArgs):
    """List a folder: one entry a line, folders end with /, files show their size."""

    path: str = Field(".", description="Folder path, relative to the workspace")


class ShellExecArgs(ToolArgs):
    """Run a bash command in the workspace; returns its exit code and combined output."""

    command: str = Field(description="The bash command line")
    timeout_s: float = Field(0, ge=0, description="Seconds before it is killed (0 = default)")


class FinishArgs(ToolArgs):
    """Declare the whole task done: ends the run for good. Only when nothing is left to do."""

    summary: str = Field(description="What was achieved and where the results are")


def _open_regular(path: Path, shown: str) -> int:
    """A descriptor on `path` if it is a regular file; never blocks on a FIFO or a device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ToolFailed(f"no such file: {shown}") from None
    kind = os.fstat(fd).st_mode
    if stat.S_ISREG(kind):
        os.set_blocking(fd, True)
        return fd
    os.close(fd)
    if stat.S_ISDIR(kind):
        raise ToolFailed(f"{shown} is a folder; use list_dir")
    raise ToolFailed(f"{shown} is not a regular file ({_KINDS.get(stat.S_IFMT(kind), 'special')})")


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}
_KINDS[stat.S_IFSOCK] = "a socket"


def file_read(ws: Workspace, args: FileReadArgs) -> Output:
    """The asked lines, read as a stream: at most `READ_MAX_BYTES` of them, whatever the size
    of the file; the whole file is counted only where it is small enough to count quickly."""
    fd = _open_regular(ws.resolve(args.path), args.path)
    first, kept, more, number = args.offset, 0, False, 0
    chunk: list[bytes] = []
    with os.fdopen(fd, "rb") as f:
        # Lines longer than READ_MAX_BYTES come in pieces: memory stays bounded on any file.
        while line := f.readline(READ_MAX_BYTES):
            number += 1
            if number < first:
                continue
            if len(chunk) == args.limit or kept > READ_MAX_BYTES:
                more = True
                break
            chunk.append(line)
            kept += len(line)
        size = os.fstat(fd).st_size
        total = None if more and size > COUNT_MAX_BYTES else _count(f, number, more)
    text = b"".join(chunk).decode(errors="replace").removesuffix("\n")
    last = first - 1 + len(chunk)
    if first > 1 or more:
        of = f"of {total:,}" if total is not None else f"of a {size:,}-byte file"
        text += f"\n[lines {first}-{last} {of}"
        text += f"; read more with offset={last + 1}]" if more else "]"
    return Output(text)


def _count(f: io.BufferedReader, seen: int, more: bool) -> int:
    """Lines in all: those seen, and the rest of the file counted in blocks."""
    if not more:
        return seen
    count, last = seen, b"\n"
    for block in iter(lambda: f.read(1 << 20), b""):
        count, last = count + block.count(b"\n"), block[-1:]
    return count + (last != b"\n")  # a last line without its newline


def file_write(ws: Workspace, args: FileWriteArgs) -> Output:
    path = ws.resolve(args.path)
    if path.is_dir():
        raise ToolFailed(f"{args.path} is a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write aside, then rename: a crash mid-write never leaves the agent's notes half written,
    # and a failed write (a full disk) leaves neither a half file nor the one aside.
    temporary = path.with_name(f".{path.name}.ouroboros-tmp")
    try:
        temporary.write_text(args.content)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return Output(f"wrote {len(args.content.encode()):,} bytes to {ws.display(path)}")


def list_dir(ws: Workspace, args: ListDirArgs) -> Output:
    path = ws.resolve(args.path)
    if not path.is_dir():
        raise ToolFailed(f"not a folder: {args.path}")
    entries = []
    for entry in sorted(path.iterdir(), key=lambda p: p.name):
        if entry.is_dir():
            entries.append(f"{entry.name}/")
        else:
            entries.append(f"{entry.name}  {entry.lstat().st_size:,} bytes")
    return Output("\n".join(entries) or "(empty folder)")


def spill(ws: Workspace, relative: str, text: str) -> Path:
    """Write a whole output into the workspace where the agent can page through it."""
    path = ws.root / relative
    path.parent.mkdir(exist_ok=True)
    if not path.exists():
        path.write_text(text)
    return path
