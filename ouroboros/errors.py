"""The errors a person is shown as one line, never as a traceback.

Kept apart, and light to import, so that the command line can catch them without loading the
parts of the package a quick command (`status`) does not use.
"""

from __future__ import annotations

import shutil
from pathlib import Path

NEEDED_FREE_BYTES = 16 * 1024 * 1024
"""What a run asks to be freed: room for a few thousand more records."""


class ConfigError(Exception):
    """A user error in the configuration: exit code 2."""


class RunError(Exception):
    """A run-time problem a person must fix: exit code 1."""


class StorageFull(Exception):
    """The disk of a state file is full: the run stops, whole, until there is room again."""

    def __init__(self, path: Path):
        free = shutil.disk_usage(path.parent).free if path.parent.exists() else 0
        super().__init__(
            f"no space left to write {path} ({free:,} bytes free on its disk): free at least "
            f"{NEEDED_FREE_BYTES:,} bytes there, then run the same command again; nothing was "
            "lost"
        )
