"""The managed server as people read them (`SHOWN`): its `server_started` and `server_exited`
events, `status`'s row (pid, up since, restarts) and the report's table of starts and exits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from ouroboros.ground.printable import printable
from ouroboros.observe.shown import Shown, age, table

MAX_ROWS = 100


def exit_text(line: dict[str, Any]) -> str:
    """How the server stopped, and after how long (a `server_exited` event, or the record)."""
    how = f"killed by {line['signal']}" if line.get("signal") else f"exit status {line.get('code')}"
    return f"{how} after {line.get('up_s', 0):g} s"


def started_text(r: dict[str, Any]) -> str:
    again = "started again" if r.get("restart") else "started"
    return f"model server {again}: pid {r.get('pid')}, its output in {r.get('log')}"


def exited_text(r: dict[str, Any]) -> str:
    tail = str(r.get("tail") or "").strip().splitlines()
    last = f"; its log ends: {tail[-1]}" if tail else ""
    return f"model server (pid {r.get('pid')}) stopped: {exit_text(r)}{last}"


DESCRIBED = {
    "server_started": ("cyan", started_text),
    "server_exited": ("yellow", exited_text),
}


def server_status(run: dict[str, Any], now: float, state_dir: Path) -> list[tuple[str, Text]]:
    server = run.get("server") if run else None
    if not server:
        return []
    if server.get("pid") is not None:
        said = f"pid {server['pid']}, up since {age(server.get('up_since'), now)}"
    else:
        said = "not running"
    said += f", {server.get('restarts', 0)} restart(s)"
    if server.get("last_exit"):
        said += f"; the last stop: {server['last_exit']}"
    return [("server", Text(printable(said)))]


def server_table(events: list[dict[str, Any]]) -> str:
    chosen = [e for e in events if e.get("kind") in DESCRIBED][-MAX_ROWS:]
    if not chosen:
        return '<p class="note">No managed model server (<code>[server] command</code>).</p>'
    rows = [
        [
            ("text", str(e.get("ts", ""))[:19].replace("T", " ")),
            ("", e.get("pid", "")),
            ("text", DESCRIBED[str(e["kind"])][1](e)),
        ]
        for e in reversed(chosen)
    ]
    return table("server", [("text", "time (UTC)"), ("", "pid"), ("text", "what")], rows)


SHOWN = Shown(DESCRIBED, server_status, ("Model server", server_table))
