"""Workspace checkpoints as people read them (`SHOWN`): the `checkpoint` and `rewound` events
(`tail`, the terminal), the row of `status`, and the report's table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from ouroboros.ground.printable import printable
from ouroboros.observe.shown import Shown, table, utc

MAX_ROWS = 100


def size(count: object) -> str:
    n = float(count) if isinstance(count, int | float) else 0.0
    for unit in ("bytes", "KB", "MB"):
        if n < 1000 or unit == "MB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def _left_out(r: dict[str, Any]) -> str:
    return f", {r['left_out']} left out (checkpoints.max_bytes)" if r.get("left_out") else ""


def checkpoint_text(r: dict[str, Any]) -> str:
    return (
        f"checkpoint of the workspace at session {r.get('session')}: {r.get('files')} files, "
        f"{size(r.get('bytes'))}{_left_out(r)} (commit {str(r.get('commit'))[:12]})"
    )


def rewinding_text(r: dict[str, Any]) -> str:
    return (
        f"rewinding the workspace to the start of session {r.get('session')} (today's files "
        f"it replaces or removes go to {r.get('moved_aside')})"
    )


def rewound_text(r: dict[str, Any]) -> str:
    moved = f"{r.get('moved')} moved aside to {r['moved_aside']}" if r.get("moved_aside") else ""
    stopped = f"; it stopped part way ({r['stopped']})" if r.get("stopped") else ""
    return (
        f"workspace rewound to the start of session {r.get('session')}: {r.get('restored')} "
        f"file(s) restored{', ' + moved if moved else ''}{stopped}"
    )


DESCRIBED = {
    "checkpoint": ("dim", checkpoint_text),
    "rewinding": ("magenta", rewinding_text),
    "rewound": ("bold magenta", rewound_text),
}
"""How `describe` shows their events."""


def checkpoints_status(run: dict[str, Any], now: float, state_dir: Path) -> list[tuple[str, Text]]:
    return [("checkpoints", status_text(run.get("checkpoints")))] if run else []


def status_text(summary: dict[str, Any] | None) -> Text:
    """`status`'s row: how many, the newest few (session, when, files, size), a rewind."""
    if not summary or not summary.get("count"):
        return Text("none yet", style="dim")
    newest = summary["newest"]
    text = Text(f"{summary['count']} (`rewind --session N` puts one back); the newest:")
    for c in reversed(newest):
        when = str(c.get("ts", ""))[:19].replace("T", " ")
        text.append(
            f"\nsession {c['session']}, {when}: {c['files']} files, {size(c['bytes'])}"
            + _left_out(c)
        )
    if rewound := summary.get("rewound"):
        where = rewound.get("moved_aside") or "nothing moved aside"
        stopped = ", stopped part way" if rewound.get("stopped") else ""
        said = printable(f"rewound to session {rewound['session']} ({where}){stopped}")
        text.append(f"\n{said}", style="magenta")
    if unfinished := summary.get("rewinding"):
        said = f"a rewind to session {unfinished['session']} did not finish (its files: "
        text.append(f"\n{printable(said + unfinished['moved_aside'])})", style="bold magenta")
    return text


def checkpoint_table(events: list[dict[str, Any]]) -> str:
    """The report's: every checkpoint and rewind, newest first."""
    chosen = [e for e in events if e.get("kind") in DESCRIBED][-MAX_ROWS:]
    if not chosen:
        return '<p class="note">No checkpoint of the workspace.</p>'
    rows = [
        [
            ("text", utc(e)),
            ("", e.get("session", "")),
            ("", e.get("files", e.get("restored", ""))),
            ("", size(e["bytes"]) if "bytes" in e else ""),
            ("text", DESCRIBED[str(e["kind"])][1](e)),
        ]
        for e in reversed(chosen)
    ]
    head = [("text", "time (UTC)"), ("", "session"), ("", "files"), ("", "size"), ("text", "what")]
    return table("checkpoints", head, rows)


SHOWN = Shown(DESCRIBED, checkpoints_status, ("Workspace checkpoints", checkpoint_table))
