"""Confine every path the agent names to the workspace, by its words alone: `..` is resolved
lexically and links are left for `safefs` to refuse when it opens the path (never followed)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PATH_MAX = 4096
SHOWN_MAX_CHARS = 200
"""A path longer than this is cut in messages (the model may send kilobytes of one)."""


class PathRefused(Exception):
    """The path leaves the workspace or goes through a link; the message is shown to the model."""


@dataclass(frozen=True)
class Location:
    """A path the agent named: a folder the harness trusts, and the names beneath it (none of
    them empty, `.` or `..`)."""

    base: Path
    parts: tuple[str, ...]
    shown: str
    """How messages name it: relative to the workspace, or in full outside it."""

    @property
    def name(self) -> str:
        return self.parts[-1]


class Workspace:
    def __init__(self, root: Path, system_prompt: Path):
        self.root = root.resolve()
        # Its folder is the user's; its name is opened without following a link (`safefs`).
        self.system_prompt = system_prompt.parent.resolve() / system_prompt.name
        self._inside = f"{str(self.root).rstrip('/')}/"

    def is_instructions(self, loc: Location) -> bool:
        return loc.base == self.system_prompt.parent and loc.parts == (self.system_prompt.name,)

    def locate(self, raw: str) -> Location:
        """Where `raw` is, if the agent may touch it."""
        if "\x00" in raw:
            raise PathRefused("path contains a NUL byte")
        # Strings, not Path objects: this runs on every file tool call (bench/tools.py).
        named = os.path.expanduser(raw) if raw.startswith("~") else raw
        path = os.path.normpath(os.path.join(self.root, named))
        if len(os.fsencode(path)) >= PATH_MAX:  # the walk alone would go deeper than the kernel
            raise PathRefused(
                f"{_cut(raw)!r} is too long: a path has at most {PATH_MAX - 1:,} bytes"
            )
        if path == str(self.root):
            return Location(self.root, (), ".")
        if path.startswith(self._inside):
            relative = path[len(self._inside) :]
            return Location(self.root, tuple(relative.split("/")), _cut(relative))
        if path == str(self.system_prompt):
            return Location(self.system_prompt.parent, (self.system_prompt.name,), path)
        through = self._through_a_link_of_the_users(path)
        if through is not None:
            return through
        raise PathRefused(
            f"{_cut(raw)!r} is outside the workspace: paths are relative to it, "
            f"as {_cut(_inside_guess(path))!r}"
        )

    def _through_a_link_of_the_users(self, path: str) -> Location | None:
        """`path` names the workspace through a link above it (a home folder that is a link,
        `~` to it): the shortest prefix that is the workspace, the rest taken as named. Links
        above the workspace are the user's; none below it is followed, by the opener."""
        parts = path.split("/")
        for end in range(2, len(parts) + 1):
            if os.path.realpath("/".join(parts[:end])) == str(self.root):
                rest = tuple(parts[end:])
                return Location(self.root, rest, _cut("/".join(rest)) if rest else ".")
        return None


def _inside_guess(path: str) -> str:
    """The workspace path a path outside it most likely meant: what follows a `workspace`
    folder in it (`/workspace/todo.txt`, as in the containers agents are trained in), else its
    file name. Only said: the refusal names where to write, and never the real folders (a small
    model copied the absolute paths it was shown into paths of its own)."""
    parts = path.split("/")
    if "workspace" in parts[:-1]:
        return "/".join(parts[len(parts) - parts[::-1].index("workspace") :])
    return parts[-1] or "."


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_MAX_CHARS else text[:SHOWN_MAX_CHARS] + "…"
