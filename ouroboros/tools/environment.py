"""The environment a command runs with: what `tools.env` lets through from the harness's own, and
the private temporary folder. Nothing else: the harness's environment holds the server's API
key (`OUROBOROS_LLM__API_KEY`, `OPENAI_API_KEY`), cloud credentials and the user's SSH agent
socket, none of which the agent's commands need or should see. A hook's (`operator/hooks.py`) is
what `hooks.env` lets through, by the same rule."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from pathlib import Path


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
    """The allowed variables of `harness_env`, and TMPDIR (TMP, TEMP) set to `scratch`."""
    kept = allowed_env(harness_env, allowed)
    return {**kept, "TMPDIR": str(scratch), "TMP": str(scratch), "TEMP": str(scratch)}
