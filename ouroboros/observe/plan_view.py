"""The agent's plan as people read it: `status` (the plan as it stands, from `status.json`),
`tail` (a line per change, from the `plan` events) and the report (the plan as
it stands and its changes over time). Light to import, like `status`: plain JSON in, text out.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ouroboros.ground.printable import printable
from ouroboros.observe.shown import table, utc
from ouroboros.observe.svg import escape

MAX_CHANGE_ROWS = 100


def change_text(line: dict[str, Any]) -> str:
    """A `plan` event, as `tail` shows it."""
    items = line.get("items") or []
    if not items:
        return f"plan cleared (change {line.get('changes')})"
    tally = ", ".join(f"{line.get(s, 0)} {s}" for s in ("done", "doing", "todo") if line.get(s))
    doing = next((i.get("text") for i in items if i.get("status") == "doing"), None)
    now = f"; doing: {doing}" if doing else ""
    return f"plan saved (change {line.get('changes')}): {len(items)} items, {tally}{now}"


def plan_status(plan: dict[str, Any] | None) -> Text:
    """The plan as it stands, for `status`: its counts, then one line an item."""
    if not plan:
        return Text("none saved", style="dim")
    text = Text(f"{plan.get('counts')} (saved in session {plan.get('session')})")
    if plan.get("shown"):
        text.append("\n" + printable(str(plan["shown"]), lines=True))
    return text


def plan_section(events: list[dict[str, Any]]) -> str:
    """The report's part on the plan: the plan as it stands, then every change, newest first."""
    changes = [e for e in events if e.get("kind") == "plan"]
    if not changes:
        return '<p class="note">The agent saved no plan.</p>'
    items = changes[-1].get("items") or []
    listed = "".join(
        f"<li><b>{escape(i.get('status'))}</b> {escape(i.get('text'))}"
        + (f' <span class="note">({escape(i.get("note"))})</span>' if i.get("note") else "")
        + "</li>"
        for i in items
    )
    current = f'<ol id="plan">{listed}</ol>' if items else '<p class="note">Cleared.</p>'
    rows = [
        [("text", utc(e)), ("", e.get("session", "")), ("text", change_text(e))]
        for e in reversed(changes[-MAX_CHANGE_ROWS:])
    ]
    head = [("text", "time (UTC)"), ("", "session"), ("text", "change")]
    more = len(changes) - MAX_CHANGE_ROWS
    note = f'<p class="note">The {MAX_CHANGE_ROWS} newest of {len(changes):,} changes.</p>'
    return f"{current}{note if more > 0 else ''}{table('plan-changes', head, rows)}"
