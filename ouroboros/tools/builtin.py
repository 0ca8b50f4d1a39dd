"""The built-in tools. Each takes validated arguments and returns text for the model."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ouroboros.tools.workspace import Workspace

READ_DEFAULT_LINES = 400


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


def file_read(ws: Workspace, args: FileReadArgs) -> Output:
    path = ws.resolve(args.path)
    if path.is_dir():
        raise ToolFailed(f"{args.path} is a folder; use list_dir")
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        raise ToolFailed(f"no such file: {args.path}") from None
    chunk = lines[args.offset - 1 : args.offset - 1 + args.limit]
    text = "\n".join(chunk)
    last = args.offset - 1 + len(chunk)
    if args.offset > 1 or last < len(lines):
        text += f"\n[lines {args.offset}-{last} of {len(lines)}"
        text += f"; read more with offset={last + 1}]" if last < len(lines) else "]"
    return Output(text)


def file_write(ws: Workspace, args: FileWriteArgs) -> Output:
    path = ws.resolve(args.path)
    if path.is_dir():
        raise ToolFailed(f"{args.path} is a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write aside, then rename: a crash mid-write never leaves the agent's notes half written.
    temporary = path.with_name(f".{path.name}.ouroboros-tmp")
    temporary.write_text(args.content)
    os.replace(temporary, path)
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
