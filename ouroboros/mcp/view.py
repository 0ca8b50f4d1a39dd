"""The MCP servers as people read them (`SHOWN`): the `mcp_offered` and `mcp_fault` events and
`status`'s row. Never imports the SDK."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from ouroboros.ground.printable import printable
from ouroboros.mcp.records import offered_text
from ouroboros.observe.shown import Shown


def mcp_row(run: dict[str, Any], now: float, state_dir: Path) -> list[tuple[str, Text]]:
    return [("mcp", Text(printable(run["mcp"])))] if run.get("mcp") else []


SHOWN = Shown(
    {
        "mcp_offered": ("dim", lambda r: f"mcp: {offered_text(r)}"),
        "mcp_fault": (
            "yellow",
            lambda r: (
                f"mcp server {r.get('server')} ({r.get('tool')}): {r.get('fault')}; "
                f"may start again {r.get('starts_left')} more time(s) this session"
            ),
        ),
    },
    mcp_row,
)
