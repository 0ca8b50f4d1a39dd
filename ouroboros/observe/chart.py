"""The report's chart: the context used by every model call, as inline SVG written here (no
plotting library, no script, nothing fetched), with the lines the run recorded and its masks,
wind-downs and restarts marked."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import groupby

from ouroboros.context.tokens import Budget
from ouroboros.observe.run_data import Mark, RunData, SessionSummary
from ouroboros.observe.svg import (
    BOTTOM,
    LEFT,
    RIGHT,
    TOP,
    Frame,
    H,
    W,
    escape,
    grid,
    legend_row,
    spread,
)

ZONE_COLOUR = {"normal": "#2e9e44", "soft": "#d9a400", "hard": "#d62728", "over": "#7a0010"}
DOTS_UP_TO = 400
"""Beyond this many calls the chart draws the line without a dot per call."""
MAX_LABELLED_RESTARTS = 20
"""Beyond this many restarts the vertical lines go without their labels."""


@dataclass(frozen=True)
class Lines:
    """Where the harness drew its lines, per context window: as the run recorded them (its
    `context_window` events), else as the settings would place them."""

    soft: float
    hard: float
    max_output: int
    margin: float
    recorded: dict[int, Budget] = field(default_factory=dict)

    def budget(self, limit: int) -> Budget:
        if limit in self.recorded:
            return self.recorded[limit]
        return Budget.for_window(limit, self.soft, self.hard, self.max_output, self.margin)

    def levels(self, limit: int, in_force: int | None = None) -> list[tuple[str, int, str, str]]:
        """(name, tokens, colour, dash) of each line, top to bottom; the hard line where it
        was in force (`in_force`, placed below the configured one), else where configured."""
        b = self.budget(limit)
        hard_line = b.hard_line if in_force is None else in_force
        soft, hard = b.soft_line / b.prompt_budget, hard_line / b.prompt_budget
        return [
            (f"window {limit:,}", limit, "#222", ""),
            (f"prompt budget {b.prompt_budget:,}", b.prompt_budget, "#777", "2,3"),
            (f"hard {hard:.0%}: {hard_line:,}", hard_line, "#d62728", "7,4"),
            (f"soft {soft:.0%}: {b.soft_line:,}", b.soft_line, "#d9a400", "7,4"),
        ]


def _bands(f: Frame, sessions: list[SessionSummary]) -> Iterable[str]:
    shown = [s for s in sessions if s.calls]
    narrowest = min(f.x(s.calls[-1].index + 0.5) - f.x(s.calls[0].index - 0.5) for s in shown)
    # One style of label for every band, or none (the table below names them all).
    style = next(
        (t for t in ("session {}", "s{}") if len(t.format(len(sessions))) * 7 < narrowest), ""
    )
    for i, s in enumerate(shown):
        x0, x1 = f.x(s.calls[0].index - 0.5), f.x(s.calls[-1].index + 0.5)
        fill = "#eef2f8" if i % 2 == 0 else "#f9fafc"
        yield (
            f'<rect x="{x0:.1f}" y="{TOP}" width="{x1 - x0:.1f}" height="{f.height}" '
            f'fill="{fill}"/>'
        )
        label = style.format(s.number)
        yield (
            f'<text x="{(x0 + x1) / 2:.1f}" y="{TOP - 8}" text-anchor="middle" '
            f'class="band">{escape(label)}</text>'
        )


def _thresholds(f: Frame, sessions: list[SessionSummary], lines: Lines) -> Iterable[str]:
    """The lines as each call had them: a step where the hard line in force moved."""
    with_calls = [s for s in sessions if s.calls]
    for s in with_calls:
        for (limit, in_force), group in groupby(s.calls, lambda c: (c.limit, c.hard_line)):
            calls = list(group)
            x0, x1 = f.x(calls[0].index - 0.5), f.x(calls[-1].index + 0.5)
            for name, tokens, colour, dash in lines.levels(limit, in_force):
                y = f.y(tokens)
                yield (
                    f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                    f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="{dash}">'
                    f"<title>{escape(name)}</title></line>"
                )
    last = with_calls[-1].calls[-1]
    levels = lines.levels(last.limit, last.hard_line)
    for (name, _tokens, colour, _dash), y in zip(
        levels, spread([f.y(t) for _, t, _, _ in levels]), strict=True
    ):
        yield (
            f'<text x="{W - RIGHT + 8}" y="{y + 4:.1f}" fill="{colour}" '
            f'class="threshold">{escape(name)}</text>'
        )


VERTICALS = {"session_restart": ("#6a3d9a", "", 1.6), "wind_down": ("#e8710a", "5,3", 1.4)}
"""The marks drawn as a line down the chart: colour, dash, width."""


def _verticals(f: Frame, marks: list[Mark]) -> Iterable[str]:
    for m in marks:
        if m.kind not in VERTICALS:
            continue
        colour, dash, width = VERTICALS[m.kind]
        x = f.x(m.x)
        yield (
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="{colour}" '
            f'stroke-width="{width}" stroke-dasharray="{dash}">'
            f"<title>{escape(m.label)}</title></line>"
        )


def _vertical_labels(f: Frame, marks: list[Mark]) -> Iterable[str]:
    """Each line's label beside it, reading upwards from the top: drawn after every line and
    point, on a halo of the page's colour (`.vlabel`), so that no line crosses it; right of its
    line where left of it would cross the axis."""
    labelled = -math.inf
    restarts = sum(m.kind == "session_restart" for m in marks)
    for m in marks:
        if m.kind not in VERTICALS:
            continue
        x = f.x(m.x)
        if restarts > MAX_LABELLED_RESTARTS or x - labelled < 13:
            continue  # too crowded to read: the line and the legend say enough
        labelled = x
        text = "restart" if m.kind == "session_restart" else "wind-down"
        # Rotated, the text stands on its baseline and reaches 8 pixels to the left of it.
        baseline = x - 4 if x - 13 > LEFT else x + 12
        yield (
            f'<text transform="translate({baseline:.1f},{TOP + 6}) rotate(-90)" '
            f'text-anchor="end" fill="{VERTICALS[m.kind][0]}" class="vlabel">{text}</text>'
        )


def _series(f: Frame, sessions: list[SessionSummary], first: int = 0) -> Iterable[str]:
    dots = f.n <= DOTS_UP_TO
    for s in sessions:
        if not s.calls:
            continue
        points = " ".join(f"{f.x(c.index):.1f},{f.y(c.total):.1f}" for c in s.calls)
        yield f'<polyline points="{points}" class="series"/>'
        if not dots:
            continue
        for c in s.calls:
            tip = (
                f"call {first + c.index + 1:,}: session {c.session} turn {c.turn}, {c.total:,} of "
                f"{c.budget:,} tokens ({c.total / max(1, c.budget):.0%}, {c.zone}, {c.source})"
            )
            yield (
                f'<circle cx="{f.x(c.index):.1f}" cy="{f.y(c.total):.1f}" r="3.2" '
                f'fill="{ZONE_COLOUR.get(c.zone, "#555")}"><title>{escape(tip)}</title></circle>'
            )


def _point_marks(f: Frame, data: RunData) -> Iterable[str]:
    for m in data.marks:
        x = f.x(m.x)
        if m.kind == "context_mask" and 0 <= m.x < len(data.calls):
            # Above its point; along the bottom when the points are too dense to tell apart.
            y = f.y(data.calls[int(m.x)].total) - 8 if f.n <= DOTS_UP_TO else H - BOTTOM - 2
            yield (
                f'<path d="M{x - 4:.1f},{y - 6:.1f} h8 l-4,6 z" fill="#b0369c">'
                f"<title>{escape(m.label)}</title></path>"
            )
        elif m.kind == "compaction":
            yield (
                f'<rect x="{x - 4:.1f}" y="{H - BOTTOM - 10}" width="8" height="8" '
                f'fill="#1b9e77"><title>{escape(m.label)}</title></rect>'
            )
        elif m.kind in ("error", "context_overflow", "silent_truncation"):
            yield (
                f'<text x="{x:.1f}" y="{TOP + 14}" text-anchor="middle" class="bad">✕'
                f"<title>{escape(m.label)}</title></text>"
            )


def _legend() -> str:
    items = [
        (f'<circle cx="6" cy="-4" r="4" fill="{ZONE_COLOUR[z]}"/>', z) for z in ZONE_COLOUR
    ] + [
        ('<path d="M2,-8 h8 l-4,6 z" fill="#b0369c"/>', "masked"),
        ('<rect x="2" y="-8" width="8" height="8" fill="#1b9e77"/>', "compacted"),
        (
            '<line x1="6" x2="6" y1="-11" y2="3" stroke="#e8710a" stroke-dasharray="4,2"/>',
            "wind-down",
        ),
        ('<line x1="6" x2="6" y1="-11" y2="3" stroke="#6a3d9a" stroke-width="2"/>', "restart"),
        ('<text x="6" y="0" text-anchor="middle" class="bad">✕</text>', "error / overflow"),
    ]
    return legend_row(items)


def chart_svg(data: RunData, lines: Lines, first: int = 0) -> str:
    """Context used by every model call of the run, with the lines and events that matter."""
    if not data.calls:
        return '<p class="empty">No model call recorded yet.</p>'
    limits = [c.limit for c in data.calls]
    f = Frame(len(data.calls), max(max(c.total for c in data.calls), *limits) * 1.06)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" '
        f'height="{H}" role="img" aria-label="context used per model call">',
        *_bands(f, data.sessions),
        *grid(f, first),
        *_thresholds(f, data.sessions, lines),
        *_verticals(f, data.marks),
        *_series(f, data.sessions, first),
        *_point_marks(f, data),
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{H - BOTTOM}" class="axis"/>',
        f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" class="axis"/>',
        *_vertical_labels(f, data.marks),
        f'<text x="{LEFT + f.width / 2:.0f}" y="{H - BOTTOM + 40}" text-anchor="middle" '
        f'class="title">model call{"" if first else " (across the whole run)"}</text>',
        f'<text transform="translate(18,{TOP + f.height / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle" class="title">tokens in the context (prompt + reply)</text>',
        _legend(),
        "</svg>",
    ]
    return "\n".join(parts)
