"""Is a supervisor running on a state folder: its pid is alive and it holds the folder's lock.

Read by `status`, and by `unpause` and `compact` before they leave a request; the lock is taken
only for the instant it takes to see whether someone else holds it.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from ouroboros.ground.state_folder import LOCK


@dataclass(frozen=True)
class Liveness:
    alive: bool
    pid: int | None
    detail: str


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, but it exists
    return True


def _lock_held(path: Path) -> bool:
    """Try the supervisor's flock without waiting, and give it back at once."""
    with path.open("rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def liveness(state_dir: Path) -> Liveness:
    """Alive means both: the pid in `lock` exists and the flock on `lock` is held."""
    path = state_dir / LOCK
    if not path.exists():
        return Liveness(False, None, "never started here")
    text = path.read_text().strip()
    pid = int(text) if text.isdigit() else None
    held = _lock_held(path)
    if held and pid is not None and _pid_alive(pid):
        return Liveness(True, pid, f"pid {pid}")
    if held:
        return Liveness(False, pid, f"the lock is held but pid {text or '?'} is not alive")
    if pid is None:
        return Liveness(False, None, "the supervisor released its lock")
    return Liveness(False, pid, f"pid {pid} left its lock behind: killed or crashed")
