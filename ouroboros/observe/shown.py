"""What a feature shows people, declared in its folder (its view's `SHOWN`) and named by
`ouroboros/features.py`: how `tail` and the run's terminal show its events (by kind), its rows of
`status` (from `status.json`'s `run` and the state folder) and its section of the report (from
the logged events, or from the state folder). `describe`, `status` and `report` show every
named feature's, importing its view (light: no records) by name the first time. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from rich.text import Text

from ouroboros.ground import plugins
from ouroboros.observe.svg import escape

Describe = Callable[[dict[str, Any]], "str | list[str]"]
"""An event's text, or its texts from the fullest to the shortest (`describe.fit` picks one)."""
StatusRows = Callable[[dict[str, Any], float, Path], list[tuple[str, Text]]]
"""`status`'s rows from the run (`status.json`'s, {} before a run), the time, the state folder."""


@dataclass(frozen=True)
class Shown:
    described: Mapping[str, tuple[str, Describe]] = field(default_factory=dict)
    """By kind of event: its style and its text."""
    status: StatusRows | None = None
    report: tuple[str, Callable[[list[dict[str, Any]]], str]] | None = None
    """The report's heading, and its section from every logged event."""
    report_of_state: tuple[str, Callable[[Path], str]] | None = None
    """Or its heading and section from the state folder: a section that shows the run's state
    (its journal folded, as `status` and the run see it) rather than the events that led there."""


@cache
def every() -> tuple[Shown, ...]:
    """Every feature's, in the order `ouroboros/features.py` lists them."""
    return tuple(view.SHOWN for view in plugins.imported(plugins.VIEWS))


def described(kind: str) -> tuple[str, Describe] | None:
    return next((s.described[kind] for s in every() if kind in s.described), None)


def feature_rows(run: dict[str, Any], now: float, state_dir: Path) -> list[tuple[str, Text]]:
    return [row for s in every() if s.status for row in s.status(run, now, state_dir)]


def age(ts: str | None, now: float) -> str:
    """How long ago `ts` was, as `status` says it."""
    if not ts:
        return "never"
    return f"{duration(now - datetime.fromisoformat(ts).timestamp())} ago"


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


Cells = list[tuple[str, Any]]
"""A table's row: each cell's class and value."""


def table(name: str, head: Cells, rows: list[Cells], row_class: str = "") -> str:
    """A report's table: its head, then the rows; values escaped. In a box of the page's width
    that scrolls sideways where the table is wider still: the page itself never does."""

    def cells(tag: str, row: Cells) -> str:
        return "".join(f"<{tag}{_class(c)}>{escape(v)}</{tag}>" for c, v in row)

    body = "".join(f"<tr{_class(row_class)}>{cells('td', row)}</tr>" for row in rows)
    return f'<div class="wide"><table id="{name}"><tr>{cells("th", head)}</tr>{body}</table></div>'


def _class(name: str) -> str:
    return f' class="{name}"' if name else ""


def utc(line: dict[str, Any]) -> str:
    """When a logged event was written, as the report's tables show it."""
    return str(line.get("ts", ""))[:19].replace("T", " ")
