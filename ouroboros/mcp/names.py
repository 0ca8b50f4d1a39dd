"""The names the model calls MCP tools by: `mcp__<server>__<tool>`, only [a-zA-Z0-9_-] (what
OpenAI-style servers accept), at most 64 characters; a name cut short or taken already ends in a
short hash of the server and tool it stands for, so no two tools share one. Pure."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

MAX_NAME = 64
PREFIX = "mcp__"
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]")


def sanitised(text: str) -> str:
    return _NOT_ALLOWED.sub("_", text) or "_"


def _hashed(base: str, server: str, tool: str, salt: int) -> str:
    digest = hashlib.sha256(f"{server}\0{tool}\0{salt}".encode()).hexdigest()[:6]
    return f"{base[: MAX_NAME - 7]}_{digest}"


def tool_names(tools: Iterable[tuple[str, str]], taken: Iterable[str] = ()) -> list[str]:
    """The offered name of each (server, tool), in order: none of them in `taken` (the
    built-in tools) nor twice."""
    used = set(taken)
    names = []
    for server, tool in tools:
        name = base = f"{PREFIX}{sanitised(server)}__{sanitised(tool)}"
        salt = 0
        while len(name) > MAX_NAME or name in used:
            name = _hashed(base, server, tool, salt)
            salt += 1
        used.add(name)
        names.append(name)
    return names
