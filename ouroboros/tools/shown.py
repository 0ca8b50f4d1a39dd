"""The workspace's small text files, read for a session's opening in the files protocol
(`llm.tool_protocol = "files"`), where a model that cannot call tools still sees what it is to
change. Each file is shown whole or not at all: a model that writes a file whole from part of
it loses the rest. Read as `file_read` reads, through `safefs`: no link is followed, no FIFO
blocks, and the walk never leaves the workspace."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence

from ouroboros.ground import prompts
from ouroboros.tools import safefs
from ouroboros.tools.workspace import Location, PathRefused, Workspace

MAX_FILE_BYTES = 16 * 1024
"""A bigger file is named, not shown: whole, it would leave a small window no room to work."""
MAX_ENTRIES = 500
"""Entries walked at most: a workspace of thousands of files is named in part, not read."""
SKIPPED = frozenset({"__pycache__", "node_modules"})
"""Folders of generated files no task is about (hidden ones, `.git` among them, too)."""


def _walk(ws: Workspace) -> list[tuple[str, int]]:
    """The workspace's regular files (path, size), breadth first, by name; hidden entries left
    out, and links (their mode is the link's: neither a folder nor a regular file)."""
    found: list[tuple[str, int]] = []
    folders: list[tuple[str, ...]] = [()]
    seen = 0
    while folders and seen < MAX_ENTRIES:
        parts = folders.pop(0)
        try:
            listing = safefs.entries(Location(ws.root, parts, "/".join(parts) or "."))
        except (OSError, PathRefused):
            continue
        for entry in listing:
            seen += 1
            if entry.name.startswith(".") or seen > MAX_ENTRIES:
                continue
            if stat.S_ISDIR(entry.mode) and entry.name not in SKIPPED:
                folders.append((*parts, entry.name))
            elif stat.S_ISREG(entry.mode):
                found.append(("/".join((*parts, entry.name)), entry.size))
    return found


def text_of(ws: Workspace, path: str) -> str | None:
    """The file's text, or None: not a regular file now, too big, or not UTF-8 text."""
    try:
        fd = safefs.open_regular(ws.locate(path))
    except (OSError, PathRefused):
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES or b"\x00" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def shown_files(
    ws: Workspace, first: Sequence[str], fits: Callable[[list[tuple[str, str]]], bool]
) -> tuple[list[tuple[str, str]], list[str]]:
    """The files to show whole (path, text), those `first` names before the others, as many as
    `fits` takes; and the paths of the text files left out."""
    files = _walk(ws)
    named = {os.path.normpath(p) for p in first}
    files.sort(key=lambda f: (f[0] not in named, f[0].count("/"), f[0]))
    shown: list[tuple[str, str]] = []
    others: list[str] = []
    for path, size in files:
        if ws.is_instructions(ws.locate(path)):
            continue  # every request's system message holds it
        text = text_of(ws, path) if size <= MAX_FILE_BYTES else None
        if text is None:
            others += [path] if size > MAX_FILE_BYTES else []  # binary: nothing to write whole
        elif fits([*shown, (path, text)]):
            shown.append((path, text))
        else:
            others.append(path)
    return shown, others


def files_view(
    ws: Workspace, price: Callable[[str], int], room: int, first: Sequence[str]
) -> tuple[str, list[str]]:
    """The workspace's files as the files protocol's opening shows them, in at most `room`
    tokens as `price` prices them, and the paths shown whole."""

    def fits(files: list[tuple[str, str]]) -> bool:
        return price(prompts.files_shown(files, [])) <= room

    files, others = shown_files(ws, first, fits)
    return prompts.files_shown(files, others), [path for path, _ in files]
