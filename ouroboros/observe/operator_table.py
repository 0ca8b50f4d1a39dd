"""The report's table of what the person who runs the agent did: messages `tell` delivered,
pauses and resumes."""

from __future__ import annotations

from typing import Any

from ouroboros.observe.svg import escape

OPERATOR = ("told", "paused", "resumed")
MAX_ROWS = 100


def operator_table(events: list[dict[str, Any]]) -> str:
    """Newest first; a message's text, or who paused or resumed the run."""
    chosen = [e for e in events if e.get("kind") in OPERATOR]
    if not chosen:
        return '<p class="note">No message from <code>tell</code>, no pause.</p>'
    rows = []
    for e in reversed(chosen[-MAX_ROWS:]):
        cells = [
            ("text", str(e.get("ts", ""))[:19].replace("T", " ")),
            ("text", e.get("kind")),
            ("", e.get("session", "")),
            ("text", str(e.get("text") or f"by {e.get('by')}")[:400]),
        ]
        rows.append("<tr>" + "".join(f'<td class="{c}">{escape(v)}</td>' for c, v in cells))
    head = (
        "<tr><th class=text>time (UTC)</th><th class=text>kind</th><th>session</th>"
        "<th class=text>what</th></tr>"
    )
    return f'<table id="operator">{head}{"</tr>".join(rows)}</tr></table>'
