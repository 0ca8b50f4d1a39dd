"""Dead ends as people read them (`SHOWN`): the `dead_end` event (`tail`, the terminal) when a
call fails the same way as a remembered one, and `status`'s row. Pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from ouroboros.ground import prompts
from ouroboros.ground.printable import printable
from ouroboros.observe.shown import Describe, Shown


def _times(n: object) -> str:
    return prompts.times(n) if isinstance(n, int) else "?"


def met_text(r: dict[str, Any]) -> str:
    return (
        f"dead end met again: {r.get('call')} failed this way {_times(r.get('times'))} before, "
        f"last in session {r.get('last_session')} ({r.get('failure')})"
    )


DESCRIBED: dict[str, tuple[str, Describe]] = {"dead_end": ("yellow", met_text)}


def dead_end_rows(run: dict[str, Any], now: float, state_dir: Path) -> list[tuple[str, Text]]:
    """How many are remembered and met again, and the newest."""
    summary = run.get("dead_ends") or {}
    if not summary.get("count") and not summary.get("met"):
        return []
    text = Text(f"{summary.get('count', 0)} remembered, {summary.get('met', 0)} met again")
    for end in summary.get("newest") or []:
        times = f", {_times(end.get('times'))}" if end.get("times", 1) > 1 else ""
        said = f"{end.get('call')}: {end.get('failure')} (session {end.get('session')}{times})"
        text.append(f"\n{printable(said)}", style="dim")
    return [("dead ends", text)]


SHOWN = Shown(DESCRIBED, dead_end_rows)
