"""The report's overview of a long run: its calls gathered into buckets, each drawn as the least,
mean and most context any of its calls used, with restarts, wind-downs and errors as ticks in
lanes of their own, a tick per few pixels at most, as tall as how many events it stands for. The
page stays the same size however long the run (a few hundred KB at 100,000 calls), and reads.

A run short enough to draw call by call (`LONG_RUN` calls or fewer) is drawn that way
(`chart.chart_svg`); a long one gets this overview and, below it, the last `ZOOM_CALLS` calls
drawn call by call.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import replace

from ouroboros.observe.chart import Lines
from ouroboros.observe.run_data import Call, Mark, RunData
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

LONG_RUN = 1_000
"""More calls than this, and the chart is an overview (the page would grow with every call)."""
BUCKETS = 500
ZOOM_CALLS = 200
LANES = [
    ("restart", "restarts", "#6a3d9a", ("session_restart",)),
    ("wind-down", "wind-downs", "#e8710a", ("wind_down",)),
    ("error", "errors", "#c00000", ("error", "context_overflow", "silent_truncation")),
]
"""The events drawn as ticks, each kind in a lane of its own along the bottom, bottom first."""
LANE = 14
"""A lane's height in pixels, its label's line in the right margin included."""
TICK_SPACING = 6
"""Pixels between two ticks of a lane at least: the events closer than this are one tick,
as tall as how many they are, so 400 restarts in 700 pixels stay a comb, not a band."""


def buckets(calls: list[Call], count: int) -> list[list[Call]]:
    """The calls in `count` runs of (nearly) equal length, in order."""
    size = max(1, -(-len(calls) // count))
    return [calls[i : i + size] for i in range(0, len(calls), size)]


def _band(f: Frame, groups: list[list[Call]]) -> Iterable[str]:
    """The least and the most of each bucket as one filled shape, its mean as a line."""
    first = 0
    tops, bottoms, means = [], [], []
    for group in groups:
        x = f.x(first + (len(group) - 1) / 2)
        totals = [c.total for c in group]
        tops.append(f"{x:.1f},{f.y(max(totals)):.1f}")
        bottoms.append(f"{x:.1f},{f.y(min(totals)):.1f}")
        means.append(f"{x:.1f},{f.y(statistics.fmean(totals)):.1f}")
        first += len(group)
    outline = " ".join(tops + bottoms[::-1])
    yield f'<polygon points="{outline}" fill="#9db7e0" fill-opacity="0.55" stroke="none"/>'
    yield f'<polyline points="{" ".join(means)}" class="series"/>'


def _ticks(f: Frame, marks: list[Mark]) -> Iterable[str]:
    """A lane per kind of event: a tick per `TICK_SPACING` pixels where any happened, its height
    how many (of the most in one tick of that lane), each naming its calls and count; the lane's
    total in the right margin."""
    lane = 0
    for name, plural, colour, kinds in LANES:
        counts: dict[int, list[float]] = {}
        for m in marks:
            if m.kind in kinds:
                counts.setdefault(int((f.x(m.x) - LEFT) // TICK_SPACING), []).append(m.x)
        if not counts:
            continue
        bottom = H - BOTTOM - 2 - lane * LANE
        most = max(len(xs) for xs in counts.values())
        total = sum(len(xs) for xs in counts.values())
        ticks = []
        for slot, xs in sorted(counts.items()):
            height = max(3.0, (LANE - 4) * len(xs) / most)
            # x.5 is between two calls: the event came after the first, numbered from 1.
            first, last = math.floor(min(xs)) + 1, math.floor(max(xs)) + 1
            calls = f"call {first:,}" if first == last else f"calls {first:,}–{last:,}"
            ticks.append(
                f'<rect x="{LEFT + slot * TICK_SPACING + 2}" y="{bottom - height:.1f}" '
                f'width="2" height="{height:.1f}"><title>{calls}: {len(xs):,} × {escape(name)}'
                "</title></rect>"
            )
        yield (
            f'<g fill="{colour}"><title>{total:,} × {escape(name)}</title>{"".join(ticks)}</g>'
            f'<text x="{W - RIGHT + 8}" y="{bottom - 1}" fill="{colour}" class="lane">'
            f"{total:,} {plural if total > 1 else name}</text>"
        )
        lane += 1


def _lines(f: Frame, data: RunData, lines: Lines) -> Iterable[str]:
    """The lines of the run's last call (its window, the hard line in force), across the
    chart, labelled at its right."""
    last = data.calls[-1]
    levels = lines.levels(last.limit, last.hard_line)
    labels = spread([f.y(tokens) for _, tokens, _, _ in levels])
    for (name, tokens, colour, dash), at in zip(levels, labels, strict=True):
        y = f.y(tokens)
        yield (
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}" '
            f'stroke-width="1.5" stroke-dasharray="{dash}"/>'
            f'<text x="{W - RIGHT + 8}" y="{at + 4:.1f}" fill="{colour}" class="threshold">'
            f"{escape(name)}</text>"
        )


def _legend(per: int) -> str:
    items = [
        ('<rect x="0" y="-9" width="12" height="9" fill="#9db7e0"/>', f"least–most of {per:,}"),
        ('<line x1="0" x2="12" y1="-4" y2="-4" class="series"/>', "mean"),
        ('<line x1="6" x2="6" y1="-10" y2="0" stroke="#6a3d9a"/>', "restart"),
        ('<line x1="6" x2="6" y1="-10" y2="0" stroke="#e8710a"/>', "wind-down"),
        ('<line x1="6" x2="6" y1="-10" y2="0" stroke="#c00000"/>', "error / overflow"),
    ]
    return legend_row(items, indent=18)


def overview_svg(data: RunData, lines: Lines) -> str:
    """Context used across the whole run, bucket by bucket."""
    calls = data.calls
    groups = buckets(calls, BUCKETS)
    limits = [c.limit for c in calls]
    f = Frame(len(calls), max(max(c.total for c in calls), *limits) * 1.06)
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" '
            f'height="{H}" role="img" aria-label="context used across the run">',
            *grid(f),
            *_lines(f, data, lines),
            *_band(f, groups),
            *_ticks(f, data.marks),
            f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{H - BOTTOM}" class="axis"/>',
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" '
            'class="axis"/>',
            f'<text x="{LEFT + f.width / 2:.0f}" y="{H - BOTTOM + 40}" text-anchor="middle" '
            f'class="title">model call ({len(calls):,} in all, {len(groups[0]):,} per bucket)'
            "</text>",
            f'<text transform="translate(18,{TOP + f.height / 2:.0f}) rotate(-90)" '
            'text-anchor="middle" class="title">tokens in the context (prompt + reply)</text>',
            _legend(len(groups[0])),
            "</svg>",
        ]
    )


def calls_between(data: RunData, start: int, stop: int) -> RunData:
    """The run's calls `start` to `stop` (a zoom) as a run of their own, numbered from 0."""
    calls = [replace(c, index=c.index - start) for c in data.calls[start:stop]]
    by_session: dict[int, list[Call]] = {}
    for c in calls:
        by_session.setdefault(c.session, []).append(c)
    sessions = [
        replace(s, calls=by_session[s.number], side_calls=[])
        for s in data.sessions
        if s.number in by_session
    ]
    marks = [replace(m, x=m.x - start) for m in data.marks if start - 0.5 <= m.x < stop + 0.5]
    return replace(data, calls=calls, sessions=sessions, marks=marks)
