"""Checked progress as people read it (`SHOWN`): the `check`, `tasks_added` and `stalling`
events (`tail`, the terminal), `status`'s row (passing of total, when last checked), and the
report's section: a burn-up of passing items by session and a table of every item."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from ouroboros.observe.shown import Describe, Shown, age, table, utc
from ouroboros.observe.svg import escape
from ouroboros.progress import tasks

MAX_ROWS = 200


def check_text(r: dict[str, Any]) -> str:
    verdict = "passed" if r.get("passed") else f"failed (exit {r.get('exit_code')})"
    when = "at the session's end" if r.get("when") == "session_end" else "marked done"
    last = f": {r['last']}" if r.get("last") and not r.get("passed") else ""
    return f"check of {r.get('item')} {verdict}, {when}: `{r.get('command')}`{last}"


DESCRIBED: dict[str, tuple[str, Describe]] = {
    "check": ("green", check_text),
    "tasks_added": (
        "cyan",
        lambda r: f"{r.get('count')} task(s) taken, the first: {r.get('first')}",
    ),
    "stalling": (
        "bold yellow",
        lambda r: (
            f"no check newly passed in {r.get('sessions')} sessions; failing: "
            + ", ".join(map(str, r.get("failing") or []))
        ),
    ),
}


def progress_rows(run: dict[str, Any], now: float, state_dir: Path) -> list[tuple[str, Text]]:
    rows = []
    if (said := run.get("progress")) and said.get("total"):
        text = Text(
            f"{said['passing']} of {said['total']} checked items pass, checked "
            f"{age(said.get('checked'), now)}"
        )
        if failing := said.get("failing"):
            text.append(f"\nfailing: {', '.join(map(str, failing))}", style="yellow")
        if said.get("quiet"):
            text.append(f"\n{said['quiet']} session(s) without a new pass", style="yellow")
        rows.append(("progress", text))
    if pending := tasks.waiting(state_dir):
        rows.append(("tasks", Text(f"{len(pending)} file(s) of tasks pending")))
    return rows


def burn_up(events: list[dict[str, Any]]) -> list[tuple[int, str, int, int]]:
    """(session, time, passing, total) after each session's newest check."""
    passing: dict[str, bool] = {}
    added, points = 0, {}
    for e in events:
        if e.get("kind") == "tasks_added":
            added += int(e.get("count") or 0)
        elif e.get("kind") == "check":
            passing[str(e.get("item"))] = bool(e.get("passed"))
            known = added + sum(1 for k in passing if not _is_task(k))
            points[int(e.get("session") or 0)] = (utc(e), sum(passing.values()), known)
    return [(s, when, p, t) for s, (when, p, t) in sorted(points.items())]


def _is_task(key: str) -> bool:
    return key.startswith("T") and key[1:].isdecimal()


def chart(points: list[tuple[int, str, int, int]]) -> str:
    """Passing (a line) and total (a dashed line) by session, as a small SVG."""
    width, height, pad = 480, 160, 24
    top = max(max(t for *_, t in points), 1)
    span = max(len(points) - 1, 1)

    def xy(i: int, value: int) -> str:
        x = pad + i * (width - 2 * pad) / span
        return f"{x:.1f},{height - pad - value * (height - 2 * pad) / top:.1f}"

    passing = " ".join(xy(i, p) for i, (_, _, p, _) in enumerate(points))
    total = " ".join(xy(i, t) for i, (*_, t) in enumerate(points))
    return (
        f'<svg id="burn-up" width="{width}" height="{height}" role="img">'
        f'<polyline points="{total}" fill="none" stroke="#999" stroke-dasharray="4"/>'
        f'<polyline points="{passing}" fill="none" stroke="#2a2" stroke-width="2"/>'
        f'<text x="{pad}" y="14">{escape(f"passing items by session (of {top})")}</text></svg>'
    )


def progress_section(events: list[dict[str, Any]]) -> str:
    checks = [e for e in events if e.get("kind") == "check"]
    if not checks:
        return '<p class="note">No checked item.</p>'
    points = burn_up(events)
    sessions = table(
        "burn-up-table",
        [("", "session"), ("text", "time (UTC)"), ("", "passing"), ("", "total")],
        [[("", s), ("text", when), ("", p), ("", t)] for s, when, p, t in points],
    )
    first: dict[str, str] = {}
    regressions: dict[str, int] = {}
    last: dict[str, dict[str, Any]] = {}
    for e in checks:
        key = str(e.get("item"))
        if e.get("passed") and key not in first:
            first[key] = f"{utc(e)} (session {e.get('session')})"
        if not e.get("passed") and key in last and last[key].get("passed"):
            regressions[key] = regressions.get(key, 0) + 1
        last[key] = e
    rows = [
        [
            ("text", key),
            ("text", "passes" if e.get("passed") else f"fails (exit {e.get('exit_code')})"),
            ("text", first.get(key, "never")),
            ("", regressions.get(key, 0)),
            ("text", utc(e)),
        ]
        for key, e in list(last.items())[:MAX_ROWS]
    ]
    head = [
        ("text", "item"),
        ("text", "now"),
        ("text", "first passed"),
        ("", "regressions"),
        ("text", "last checked"),
    ]
    return chart(points) + sessions + table("progress", head, rows)


SHOWN = Shown(DESCRIBED, progress_rows, ("Checked progress", progress_section))
