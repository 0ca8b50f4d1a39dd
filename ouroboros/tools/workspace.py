"""Confine every path the agent names to the workspace (after `..` and symlinks are resolved)."""

from __future__ import annotations

from pathlib import Path


class PathRefused(Exception):
    """The path leaves the workspace; the message is shown to the model."""


class Workspace:
    def __init__(self, root: Path, system_prompt: Path):
        self.root = root.resolve()
        self.system_prompt = system_prompt.resolve()

    def resolve(self, raw: str) -> Path:
        """The real path `raw` names, if the agent may touch it."""
        if "\x00" in raw:
            raise PathRefused("path contains a NUL byte")
        try:
            path = (self.root / Path(raw).expanduser()).resolve()
        except (RuntimeError, OSError) as e:  # a symlink loop (RuntimeError before 3.13)
            raise PathRefused(f"{raw!r} cannot be resolved: {e}") from None
        if path == self.system_prompt or path.is_relative_to(self.root):
            return path
        raise PathRefused(
            f"{raw!r} resolves to {path}, outside the workspace {self.root}; "
            f"only the workspace and {self.system_prompt} are reachable"
        )

    def display(self, path: Path) -> str:
        return str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)
