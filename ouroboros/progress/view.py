"""Checked progress as people read it (`SHOWN`): the `check`, `tasks_added` and `stalling`
events (`tail`, the terminal), `status`'s row (passing of total, failing, not checked yet, when
last checked), and the report's section: a burn-up of passing items by session and a table of
every item. `status` (from `status.json`), `task list` and the report (the journal folded) all
show the one `Progress` and say an item's standing in the same words (`ItemState.standing`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from ouroboros.ground.state_folder import JOURNAL
from ouroboros.observe.shown import Describe, Shown, age, table
from ouroboros.observe.svg import escape
from ouroboros.progress.standing import counted, standing, waiting

if TYPE_CHECKING:
    from ouroboros.progress.records import Progress

MAX_ROWS = 200


WHEN_SAID = {"session_end": "at the session's end", "finish": "at finish", "done": "marked done"}


def check_text(r: dict[str, Any]) -> str:
    verdict = "passed" if r.get("passed") else f"failed (exit {r.get('exit_code')})"
    when = WHEN_SAID.get(str(r.get("when")), "marked done")
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


def folded(state_dir: Path) -> Progress:
    """The run's checked progress, its journal folded (none before a run)."""
    # Here, not at the top: `tail` and `status` import this module, and fold no journal.
    from ouroboros.progress.records import Progress
    from ouroboros.state.journal import fold

    journal = state_dir / JOURNAL
    return fold(journal)[0].part(Progress) if journal.exists() else Progress()


def progress_rows(run: dict[str, Any], now: float, state_dir: Path) -> list[tuple[str, Text]]:
    rows = []
    if (said := run.get("progress")) and said.get("total"):
        failing = list(map(str, said.get("failing") or []))
        count = int(said.get("failing_count", len(failing)))
        line = counted(said["passing"], said["total"], count, int(said.get("unchecked", 0)))
        if said.get("checked"):
            line += f", checked {age(said['checked'], now)}"
        text = Text(line)
        if failing:
            more = f" and {count - len(failing):,} more" if count > len(failing) else ""
            text.append(f"\nfailing: {', '.join(failing)}{more}", style="yellow")
        if said.get("quiet"):
            text.append(f"\n{said['quiet']} session(s) without a new pass", style="yellow")
        rows.append(("progress", text))
    if pending := waiting(state_dir):
        rows.append(("tasks", Text(f"{len(pending)} file(s) of tasks pending")))
    return rows


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


def progress_section(state_dir: Path) -> str:
    """The burn-up and every item as the run's state holds them: the same as `status` and
    `task list` say."""
    progress = folded(state_dir)
    if not progress.items:
        return '<p class="note">No checked item.</p>'
    said = ""
    if points := progress.by_session:
        sessions = table(
            "burn-up-table",
            [("", "session"), ("text", "time (UTC)"), ("", "passing"), ("", "total")],
            [[("", s), ("text", as_utc(ts)), ("", p), ("", t)] for s, ts, p, t in points],
        )
        said = chart(points) + sessions
    rows = [
        [
            ("text", key),
            ("text", standing(item.standing, item.last)),
            (
                "text",
                f"{as_utc(item.first_pass)} (session {item.first_pass_session})"
                if item.first_pass
                else "never",
            ),
            ("", item.regressions),
            ("text", as_utc(item.checked_ts) or "never"),
        ]
        for key, item in list(progress.items.items())[:MAX_ROWS]
    ]
    head = [
        ("text", "item"),
        ("text", "now"),
        ("text", "first passed"),
        ("", "regressions"),
        ("text", "last checked"),
    ]
    if len(progress.items) > MAX_ROWS:
        said += (
            f'<p class="note">The first {MAX_ROWS} of {len(progress.items):,} items; '
            "<code>task list</code> lists every task.</p>"
        )
    return said + table("progress", head, rows)


def as_utc(ts: str) -> str:
    """When a record was written, as the report's tables show it."""
    return ts[:19].replace("T", " ")


SHOWN = Shown(DESCRIBED, progress_rows, report_of_state=("Checked progress", progress_section))
