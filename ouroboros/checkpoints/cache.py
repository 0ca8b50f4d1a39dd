"""What the last checkpoint read of each regular file, so a file unchanged since is not read
and sent to git again: its blob is named by the id git gave it then. A workspace of 100,000
small files costs a checkpoint a few seconds less.

Unchanged means the same size, modification and change times (to the nanosecond), inode and
device, as git's own index judges a file. The change time is the kernel's to set, never the
agent's (`touch` sets the modification time only), so a file written since differs. One whose
change time is within `RACY_NS` of the read is not remembered: written again in the same tick
of the clock, it would keep its times.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CACHE = "ouroboros-read-cache"
"""In the checkpoint repository: removed with it, so its ids always name objects it holds."""
MARKS = "ouroboros-marks"
"""Where `git fast-import` writes the ids of the blobs it stored, by mark."""
RACY_NS = 2_000_000_000

Stamp = tuple[int, int, int, int, int]
"""Size, modification and change times (ns), inode, device."""
Known = Mapping[bytes, tuple[Stamp, str]]
"""A file's stamp when it was read, and its blob's id, by path."""


def stamp_of(info: os.stat_result) -> Stamp:
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev)


def load(git_dir: Path) -> dict[bytes, tuple[Stamp, str]]:
    """The last checkpoint's; empty where there is none or it cannot be read."""
    try:
        fields = (git_dir / CACHE).read_bytes().split(b"\0")
    except OSError:
        return {}
    known: dict[bytes, tuple[Stamp, str]] = {}
    try:
        for head, path in zip(fields[0:-1:2], fields[1::2], strict=True):
            oid, *numbers = head.decode().split(" ")
            size, mtime, ctime, inode, device = (int(n) for n in numbers)
            known[path] = ((size, mtime, ctime, inode, device), oid)
    except ValueError:
        return {}  # cut short or garbled: every file is read, as the first time
    return known


def save(git_dir: Path, read: list[tuple[bytes, Stamp, int | str]], started_ns: int) -> None:
    """Remember the files of the commit just made: `read` holds each one's path, stamp, and its
    mark in the fast-import (its id from `MARKS`) or the id it was reused with."""
    ids: dict[int, str] = {}
    for line in (git_dir / MARKS).read_text().splitlines():
        mark, oid = line.split(" ")
        ids[int(mark.lstrip(":"))] = oid
    out = bytearray()
    for path, stamp, ref in read:
        if stamp[2] >= started_ns - RACY_NS:
            continue
        oid = ids[ref] if isinstance(ref, int) else ref
        out += b"%s %d %d %d %d %d\0%s\0" % (oid.encode(), *stamp, path)
    temporary = git_dir / f"{CACHE}.tmp"
    temporary.write_bytes(bytes(out))
    os.replace(temporary, git_dir / CACHE)


def forget(git_dir: Path) -> None:
    """After a failed commit: the next one reads every file, whatever went wrong."""
    (git_dir / CACHE).unlink(missing_ok=True)
