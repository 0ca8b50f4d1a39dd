"""What the person who runs the agent did, as people read it (`SHOWN`): the `told`, `paused`
and `unpaused` events, `status`'s rows (a pause, the messages pending and delivered) and the
report's table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from ouroboros.observe.shown import Describe, Shown, age, table, utc
from ouroboros.operator import inbox

MAX_ROWS = 100

DESCRIBED: dict[str, tuple[str, Describe]] = {
    "told": ("bold cyan", lambda r: f"told (sent {str(r.get('sent_at'))[11:19]}): {r.get('text')}"),
    "paused": ("bold yellow", lambda r: f"paused by {r.get('by')}: {r.get('message')}"),
    "unpaused": ("bold", lambda r: f"unpaused by {r.get('by')}"),
}


def operator_rows(run: dict[str, Any], now: float, state_dir: Path) -> list[tuple[str, Text]]:
    """A pause, and the messages `tell` left: those not yet delivered (in the inbox, or taken
    but carried by no request the server accepted), and the newest delivered."""
    rows = []
    if paused := run.get("paused"):
        since = age(paused.get("ts"), now)
        said = f"since {since}, by {paused.get('by')}: `python -m ouroboros unpause` goes on"
        rows.append(("paused", Text(said, style="bold yellow")))
    delivered: dict[str, str] = run.get("delivered") or {}
    taken: list[str] = run.get("undelivered") or []
    waiting = {name for name in inbox.waiting(state_dir) if name not in delivered}
    if pending := waiting | set(taken):
        said = "pending (delivered at the next step)" if run else "message(s) from `tell` pending"
        rows.append(("messages", Text(f"{len(pending)} {said}")))
    if delivered:
        said = f"{len(delivered)} delivered, the newest {age(max(delivered.values()), now)}"
        rows.append(("messages" if not pending else "", Text(said)))
    return rows


def operator_table(events: list[dict[str, Any]]) -> str:
    """Newest first; a message's text, or who paused or unpaused the run."""
    chosen = [e for e in events if e.get("kind") in DESCRIBED]
    if not chosen:
        return '<p class="note">No message from <code>tell</code>, no pause.</p>'
    rows = [
        [
            ("text", utc(e)),
            ("text", e.get("kind")),
            ("", e.get("session", "")),
            ("text", str(e.get("text") or f"by {e.get('by')}")[:400]),
        ]
        for e in reversed(chosen[-MAX_ROWS:])
    ]
    head = [("text", "time (UTC)"), ("text", "kind"), ("", "session"), ("text", "what")]
    return table("operator", head, rows)


SHOWN = Shown(DESCRIBED, operator_rows, ("Told, paused, unpaused", operator_table))
