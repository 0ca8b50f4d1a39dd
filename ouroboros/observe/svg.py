"""The SVG both report charts are drawn with: the canvas and its margins, a frame mapping calls
and tokens to coordinates, gridlines, a legend row, and text escaped for it."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from dataclasses import dataclass

from ouroboros.ground.printable import printable

W, H = 1100, 470
LEFT, RIGHT, TOP, BOTTOM = 78, 190, 44, 92


def _nice_step(span: float, ticks: int) -> float:
    raw = span / max(1, ticks)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def escape(text: object) -> str:
    """Text for HTML and SVG: the run's own words are never markup, and show every control
    character and reordering mark they hold."""
    return html.escape(printable(str(text)), quote=True)


@dataclass(frozen=True)
class Frame:
    """Maps calls and tokens to SVG coordinates."""

    n: int
    ymax: float

    @property
    def width(self) -> float:
        return W - LEFT - RIGHT

    @property
    def height(self) -> float:
        return H - TOP - BOTTOM

    def x(self, index: float) -> float:
        return LEFT + (index + 0.5) * self.width / self.n

    def y(self, tokens: float) -> float:
        return TOP + self.height * (1 - tokens / self.ymax)


def grid(f: Frame, first: int = 0) -> Iterable[str]:
    """Gridlines, and call numbers from `first` + 1 (a zoom on the last calls of a run)."""
    step = _nice_step(f.ymax, 6)
    value = 0.0
    while value <= f.ymax:
        y = f.y(value)
        yield f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
        yield f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{value:,.0f}</text>'
        value += step
    xstep = max(1, int(_nice_step(f.n, 10)))
    for index in range(0, f.n + 1, xstep):
        if index == 0:
            continue
        x = f.x(index - 1)
        bottom = H - BOTTOM
        yield f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 5}" class="axis"/>'
        label = f"{first + index:,}"
        yield f'<text x="{x:.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{label}</text>'


def legend_row(items: list[tuple[str, str]], indent: int = 16) -> str:
    """(symbol, name) pairs along the bottom of a chart."""
    parts, x = [], LEFT
    for symbol, name in items:
        label = f'<text x="{indent}" y="0">{escape(name)}</text>'
        parts.append(f'<g transform="translate({x},{H - 18})">{symbol}{label}</g>')
        x += indent + 14 + 7 * len(name)
    return "".join(parts)


LABEL_GAP = 14
"""The least distance, in pixels, between two labels of lines (their 11-px text)."""


def spread(ys: list[float], gap: float = LABEL_GAP) -> list[float]:
    """Label positions (top to bottom) pushed apart so that no two overlap."""
    out: list[float] = []
    for y in ys:
        out.append(max(y, out[-1] + gap) if out else y)
    return out
