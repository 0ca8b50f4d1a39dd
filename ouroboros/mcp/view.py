"""The MCP servers as people read them (`SHOWN`): the `mcp_offered` and `mcp_fault` events and
`status`'s row. Never imports the SDK."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.text import Text

from ouroboros.ground.printable import printable
from ouroboros.observe.shown import Shown


def offered_text(line: Mapping[str, Any]) -> str:
    """How the servers' tools are offered and what their schemas cost (an `mcp_offered` event,
    or the tally)."""
    servers: dict[str, int] = line.get("servers") or {}
    tools, share = sum(servers.values()), line.get("share_tokens") or 0
    said = (
        f"{tools} tools from {len(servers)} server(s), schemas ~{line.get('schema_tokens') or 0:,}"
        f" tokens (share {share:,}): "
    )
    if line.get("mode") == "direct":
        said += "offered directly"
    else:
        offered = line.get("offered_tokens") or 0
        said += f"found with mcp_find_tools, called with mcp_call (~{offered:,} tokens)"
    failed: dict[str, str] = line.get("failed") or {}
    return said + "".join(f"; {name} did not start: {why}" for name, why in failed.items())


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
