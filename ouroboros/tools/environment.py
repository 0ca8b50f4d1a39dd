"""The environment a command runs with: what `tools.env` lets through from the harness's own, and
the private temporary folder. Nothing else: the harness's environment holds the server's API
key (`OUROBOROS_LLM__API_KEY`, `OPENAI_API_KEY`), cloud credentials and the user's SSH agent
socket, none of which the agent's commands need or should see. A hook's (`operator/hooks.py`) is
what `hooks.env` lets through, by the same rule.

The private temporary folder (the commands' TMPDIR, `make_scratch`) is the only place outside the
workspace a confined command may write. Made fresh for each run with `mkdtemp` (an unpredictable
name, mode 0700, created with an exclusive `mkdir`), so nothing planted in the system's temporary
folder beforehand, a symlink or a folder of another user's, can become the place the confinement
grants writes to. Removed when the run ends; what a run killed before it could remove its own
left is removed by the next run.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

PREFIX = "ouroboros-tmp-"


def allowed_env(harness_env: Mapping[str, str], allowed: Sequence[str]) -> dict[str, str]:
    """The variables of `harness_env` that `allowed` (shell-style patterns) names, and a PATH."""
    kept = {
        name: value
        for name, value in harness_env.items()
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in allowed)
    }
    kept.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return kept


def command_env(
    harness_env: Mapping[str, str], allowed: Sequence[str], scratch: Path
) -> dict[str, str]:
    """The allowed variables of `harness_env`, TMPDIR (TMP, TEMP) set to `scratch`, and no
    Python bytecode written: a module rewritten in the same second at the same size is taken
    for its cached bytecode, so a check run right after the agent's fix ran the code before it."""
    kept = allowed_env(harness_env, allowed)
    scratch_dirs = {"TMPDIR": str(scratch), "TMP": str(scratch), "TEMP": str(scratch)}
    return {"PYTHONDONTWRITEBYTECODE": "1", **kept, **scratch_dirs}


def make_scratch() -> Path:
    """A new private folder named after this process, after sweeping those of dead runs."""
    sweep_scratch()
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))


def remove_scratch(path: Path) -> None:
    """Remove the folder and what commands left in it. `shutil.rmtree` works on descriptors
    and never follows a link planted inside, so it removes only what is under `path`."""
    with contextlib.suppress(OSError):
        shutil.rmtree(path)


def sweep_scratch() -> None:
    """Remove the folders of this user's runs whose process is gone."""
    root = Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            owner = entry.name.removeprefix(PREFIX).split("-")[0]
            if not entry.name.startswith(PREFIX) or not owner.isdigit():
                continue
            if Path(f"/proc/{owner}").exists():
                continue
            with contextlib.suppress(OSError):
                info = entry.lstat()  # a link or another user's folder is not ours to remove
                if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
                    remove_scratch(entry)
