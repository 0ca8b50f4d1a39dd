"""The errors a person is shown as one line, never as a traceback.

Kept apart, and light to import, so that the command line can catch them without loading the
parts of the package a quick command (`status`) does not use.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

NEEDED_FREE_BYTES = 16 * 1024 * 1024
"""What a run asks to be freed: room for a few thousand more records."""
AGAIN = "then run the same command again: nothing was lost"


class ConfigError(Exception):
    """A user error in the configuration: exit code 2."""


class RunError(Exception):
    """A run-time problem a person must fix: exit code 1."""


class SetupError(RunError):
    """A mistake in how the run is set up, which no start can get past until a person fixes it
    (the agent's instructions missing or empty, a sandbox required that the machine lacks): exit
    code 2, as a config error, so that a service manager that starts a failed run again
    (`Restart=on-failure`, `RestartPreventExitStatus=2`) does not start it for ever."""


class StateUnwritable(Exception):
    """A file of the state folder cannot be written: the run stops, whole (every record before
    the one that failed is on disk), until a person fixes it and runs the same command again."""

    def __init__(self, path: Path, message: str):
        self.path = path
        super().__init__(message)


class StorageFull(StateUnwritable):
    """The disk of a state file is full."""

    def __init__(self, path: Path):
        disk = os.statvfs(path.parent) if path.parent.exists() else None
        free = disk.f_bavail * disk.f_frsize if disk else 0
        super().__init__(
            path,
            f"no space left to write {path} ({free:,} bytes free on its disk): free at least "
            f"{NEEDED_FREE_BYTES:,} bytes there, {AGAIN}",
        )


_REMEDY = {
    errno.EROFS: "its file system is read-only: remount it read-write",
    errno.EPERM: "let this user write it and its folder (`ls -ld`, `lsattr -d` each: `chattr -i` "
    "what is immutable, `chattr -a` what is append-only)",
    errno.ENOTDIR: "a file stands where a folder on its path should be: move it, or set "
    "paths.state_dir to another folder",
    errno.ENOENT: "its folder went away: restore it",
}
_REMEDY[errno.EACCES] = _REMEDY[errno.EPERM]


def unwritable(path: Path, error: OSError) -> StateUnwritable:
    """What a person is told when writing `path`, a file of the state folder, failed."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull(path)
    remedy = _REMEDY.get(error.errno or 0, "make it writable")
    why = error.strerror or str(error)
    return StateUnwritable(path, f"cannot write {path} ({why}): {remedy}; {AGAIN}")
