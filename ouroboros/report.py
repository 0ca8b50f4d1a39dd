"""`report`: one self-contained HTML page about a run: how full the context was at every model
call, where the harness masked, wound down and restarted, and a table per session.

The chart is inline SVG written here (no plotting library, no script, nothing fetched): the page
opens anywhere, and its text is plain HTML a test can check. The threshold lines come from the
settings (`Budget.for_window` of each session's window), as the harness drew them.
"""

from __future__ import annotations

import bisect
import html
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ouroboros.config import Settings
from ouroboros.events import EVENTS_FILE, USAGE_FILE
from ouroboros.jsonl import read_objects
from ouroboros.observe.status import duration
from ouroboros.tokens import Budget

ZONE_COLOUR = {"normal": "#2e9e44", "soft": "#d9a400", "hard": "#d62728", "over": "#7a0010"}
NOTABLE = (
    "warning",
    "context_overflow",
    "silent_truncation",
    "blocked_command",
    "retry",
    "truncation",
)
MAX_NOTABLE_ROWS = 200
DOTS_UP_TO = 400
"""Beyond this many calls the chart draws the line without a dot per call."""
MAX_LABELLED_RESTARTS = 20
"""Beyond this many restarts the vertical lines go without their labels."""
"""Beyond this many calls the chart draws the line without a dot per call."""


@dataclass(frozen=True)
class Call:
    """One model call, as token_usage.jsonl recorded it."""

    index: int
    session: int
    turn: int
    ts: str
    prompt: int
    completion: int
    limit: int
    zone: str
    source: str

    @property
    def total(self) -> int:
        return self.prompt + self.completion


@dataclass
class SessionSummary:
    number: int
    calls: list[Call] = field(default_factory=list)
    started: str = ""
    start_reason: str = ""
    masks: int = 0
    masked_results: int = 0
    wind_downs: int = 0
    compactions: int = 0
    ends: list[str] = field(default_factory=list)
    """Every session_end of this session, oldest first (a run limit, then a resume, then...)."""
    side_calls: list[Call] = field(default_factory=list)
    """Calls outside the conversation (compaction snapshots): their tokens count, not plotted."""

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt for c in self.calls + self.side_calls)

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion for c in self.calls + self.side_calls)

    @property
    def peak(self) -> Call | None:
        return max(self.calls, key=lambda c: c.total / max(1, c.limit), default=None)


@dataclass(frozen=True)
class Mark:
    """An event placed on the chart: `x` is in call indices (x.5 = between two calls)."""

    x: float
    kind: str
    label: str


@dataclass(frozen=True)
class RunData:
    state_dir: Path
    calls: list[Call]
    sessions: list[SessionSummary]
    marks: list[Mark]
    events: list[dict[str, Any]]
    skipped: list[str]
    """Lines that are not JSON records."""


# --- reading ----------------------------------------------------------------------------------


def _call(index: int, r: dict[str, Any]) -> Call:
    return Call(
        index,
        int(r.get("session", 0)),
        int(r.get("turn", 0)),
        str(r.get("ts", "")),
        int(r.get("prompt_tokens", 0)),
        int(r.get("completion_tokens", 0)),
        int(r.get("context_limit", 0)),
        str(r.get("zone", "normal")),
        str(r.get("source", "")),
    )


def _mark(event: dict[str, Any], x: float) -> Mark | None:
    kind = event["kind"]
    if kind == "context_mask":
        return Mark(
            x,
            kind,
            f"masked {event.get('masked')} result(s): next prompt ~{event.get('projected_before')}"
            f" -> ~{event.get('projected_after')} tokens",
        )
    if kind == "compaction":
        return Mark(
            x,
            kind,
            f"compacted {event.get('messages_replaced')} messages: "
            f"~{event.get('projected_before')} -> ~{event.get('projected_after')}",
        )
    if kind == "wind_down":
        return Mark(x, kind, f"wind-down: ~{event.get('projected')} ≥ {event.get('hard_line')}")
    if kind == "session_restart":
        return Mark(x, kind, f"restart {event.get('restarts')} ({event.get('reason')})")
    if kind in ("context_overflow", "silent_truncation"):
        return Mark(x, kind, f"{kind}: {event.get('message', '')}"[:200])
    if kind == "run_end" and event.get("reason") == "error":
        return Mark(x, "error", f"error: {event.get('detail', '')}"[:200])
    return None


def _sessions(
    calls: list[Call], side_calls: list[Call], events: list[dict[str, Any]]
) -> list[SessionSummary]:
    sessions: dict[int, SessionSummary] = {}

    def get(number: int) -> SessionSummary:
        return sessions.setdefault(number, SessionSummary(number))

    for call in calls:
        get(call.session).calls.append(call)
    for call in side_calls:
        get(call.session).side_calls.append(call)
    for e in events:
        number = e.get("session")
        if not isinstance(number, int):
            continue
        kind, s = e["kind"], get(number)
        if kind == "session_start" and not s.started:
            s.started, s.start_reason = str(e["ts"]), str(e.get("reason", ""))
        elif kind == "context_mask":
            s.masks += 1
            s.masked_results += int(e.get("masked", 0))
        elif kind == "wind_down":
            s.wind_downs += 1
        elif kind == "compaction":
            s.compactions += 1
        elif kind in ("session_end", "run_end"):
            detail = f" ({e['detail']})" if e.get("detail") else ""
            s.ends.append(f"{e.get('reason')}{detail}")
    return [sessions[n] for n in sorted(sessions)]


def _records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of one log, and the lines skipped (these logs are for reading, the journal
    is the record)."""
    records, problems = read_objects(path)
    return records, [str(p) for p in problems]


def load(state_dir: Path) -> RunData:
    usage_records, skipped = _records(state_dir / USAGE_FILE)
    events, skipped_events = _records(state_dir / EVENTS_FILE)
    usage = [r for r in usage_records if r.get("kind") == "token_usage"]
    # The curve is the conversation's context; side calls (a snapshot request) are other prompts.
    calls = [_call(i, r) for i, r in enumerate(r for r in usage if not r.get("purpose"))]
    side_calls = [_call(-1, r) for r in usage if r.get("purpose")]
    stamps = [c.ts for c in calls]
    marks = []
    for event in events:
        before = bisect.bisect_right(stamps, str(event.get("ts", "")))
        if (mark := _mark(event, max(before - 0.5, -0.5))) is not None:
            marks.append(mark)
    sessions = _sessions(calls, side_calls, events)
    return RunData(state_dir, calls, sessions, marks, events, skipped + skipped_events)


# --- the chart --------------------------------------------------------------------------------

W, H = 1100, 470
LEFT, RIGHT, TOP, BOTTOM = 78, 190, 44, 92


def _nice_step(span: float, ticks: int) -> float:
    raw = span / max(1, ticks)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


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

    def levels(self, limit: int) -> list[tuple[str, int, str, str]]:
        """(name, tokens, colour, dash) of each line, top to bottom."""
        b = self.budget(limit)
        soft, hard = b.soft_line / b.prompt_budget, b.hard_line / b.prompt_budget
        return [
            (f"window {limit:,}", limit, "#222", ""),
            (f"prompt budget {b.prompt_budget:,}", b.prompt_budget, "#777", "2,3"),
            (f"hard {hard:.0%}: {b.hard_line:,}", b.hard_line, "#d62728", "7,4"),
            (f"soft {soft:.0%}: {b.soft_line:,}", b.soft_line, "#d9a400", "7,4"),
        ]


def _spread(ys: list[float], gap: float) -> list[float]:
    """Push label positions apart (top to bottom) so no two overlap."""
    out: list[float] = []
    for y in ys:
        out.append(max(y, out[-1] + gap) if out else y)
    return out


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
            f'class="band">{_e(label)}</text>'
        )


def _grid(f: Frame) -> Iterable[str]:
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
        yield f'<text x="{x:.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{index}</text>'


def _thresholds(f: Frame, sessions: list[SessionSummary], lines: Lines) -> Iterable[str]:
    with_calls = [s for s in sessions if s.calls]
    for s in with_calls:
        x0, x1 = f.x(s.calls[0].index - 0.5), f.x(s.calls[-1].index + 0.5)
        for name, tokens, colour, dash in lines.levels(s.calls[-1].limit):
            y = f.y(tokens)
            yield (
                f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}" '
                f'stroke-width="1.5" stroke-dasharray="{dash}"><title>{_e(name)}</title></line>'
            )
    levels = lines.levels(with_calls[-1].calls[-1].limit)
    for (name, _tokens, colour, _dash), y in zip(
        levels, _spread([f.y(t) for _, t, _, _ in levels], 14), strict=True
    ):
        yield (
            f'<text x="{W - RIGHT + 8}" y="{y + 4:.1f}" fill="{colour}" '
            f'class="threshold">{_e(name)}</text>'
        )


def _verticals(f: Frame, marks: list[Mark]) -> Iterable[str]:
    styles = {"session_restart": ("#6a3d9a", "", 1.6), "wind_down": ("#e8710a", "5,3", 1.4)}
    labelled = -math.inf
    restarts = sum(m.kind == "session_restart" for m in marks)
    for m in marks:
        if m.kind not in styles:
            continue
        colour, dash, width = styles[m.kind]
        x = f.x(m.x)
        yield (
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="{colour}" '
            f'stroke-width="{width}" stroke-dasharray="{dash}"><title>{_e(m.label)}</title></line>'
        )
        if restarts > MAX_LABELLED_RESTARTS or x - labelled < 13:
            continue  # too crowded to read: the line and the legend say enough
        labelled = x
        text = "restart" if m.kind == "session_restart" else "wind-down"
        yield (
            f'<text transform="translate({x - 4:.1f},{TOP + 6}) rotate(-90)" text-anchor="end" '
            f'fill="{colour}" class="vlabel">{text}</text>'
        )


def _series(f: Frame, sessions: list[SessionSummary]) -> Iterable[str]:
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
                f"call {c.index + 1}: session {c.session} turn {c.turn}, {c.total:,} of "
                f"{c.limit:,} tokens ({c.total / max(1, c.limit):.0%}, {c.zone}, {c.source})"
            )
            yield (
                f'<circle cx="{f.x(c.index):.1f}" cy="{f.y(c.total):.1f}" r="3.2" '
                f'fill="{ZONE_COLOUR.get(c.zone, "#555")}"><title>{_e(tip)}</title></circle>'
            )


def _point_marks(f: Frame, data: RunData) -> Iterable[str]:
    for m in data.marks:
        x = f.x(m.x)
        if m.kind == "context_mask" and 0 <= m.x < len(data.calls):
            # Above its point; along the bottom when the points are too dense to tell apart.
            y = f.y(data.calls[int(m.x)].total) - 8 if f.n <= DOTS_UP_TO else H - BOTTOM - 2
            yield (
                f'<path d="M{x - 4:.1f},{y - 6:.1f} h8 l-4,6 z" fill="#b0369c">'
                f"<title>{_e(m.label)}</title></path>"
            )
        elif m.kind == "compaction":
            yield (
                f'<rect x="{x - 4:.1f}" y="{H - BOTTOM - 10}" width="8" height="8" '
                f'fill="#1b9e77"><title>{_e(m.label)}</title></rect>'
            )
        elif m.kind in ("error", "context_overflow", "silent_truncation"):
            yield (
                f'<text x="{x:.1f}" y="{TOP + 14}" text-anchor="middle" class="bad">✕'
                f"<title>{_e(m.label)}</title></text>"
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
    parts, x = [], LEFT
    for symbol, name in items:
        label = f'<text x="16" y="0">{_e(name)}</text>'
        parts.append(f'<g transform="translate({x},{H - 18})">{symbol}{label}</g>')
        x += 30 + 7 * len(name)
    return "".join(parts)


def chart_svg(data: RunData, lines: Lines) -> str:
    """Context used by every model call of the run, with the lines and events that matter."""
    if not data.calls:
        return '<p class="empty">No model call recorded yet.</p>'
    limits = [c.limit for c in data.calls]
    f = Frame(len(data.calls), max(max(c.total for c in data.calls), *limits) * 1.06)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" '
        f'height="{H}" role="img" aria-label="context used per model call">',
        *_bands(f, data.sessions),
        *_grid(f),
        *_thresholds(f, data.sessions, lines),
        *_verticals(f, data.marks),
        *_series(f, data.sessions),
        *_point_marks(f, data),
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{H - BOTTOM}" class="axis"/>',
        f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" class="axis"/>',
        f'<text x="{LEFT + f.width / 2:.0f}" y="{H - BOTTOM + 40}" text-anchor="middle" '
        f'class="title">model call (across the whole run)</text>',
        f'<text transform="translate(18,{TOP + f.height / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle" class="title">tokens in the context (prompt + reply)</text>',
        _legend(),
        "</svg>",
    ]
    return "\n".join(parts)


# --- the page ---------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; color: #222; margin: 24px auto; max-width: 1120px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.meta { color: #555; } .meta b { color: #222; }
svg text { font: 11px system-ui, sans-serif; fill: #444; }
svg .title { font-size: 12px; fill: #333; } svg .band { font-size: 12px; fill: #556; }
svg .threshold { font-size: 11px; font-weight: 600; } svg .vlabel { font-size: 10px; }
svg .bad { font-size: 14px; fill: #c00; font-weight: 700; }
svg .grid { stroke: #dde1e7; } svg .axis { stroke: #444; }
svg .series { fill: none; stroke: #2a5caa; stroke-width: 1.6; }
table { border-collapse: collapse; margin-top: 8px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e3e6ea; text-align: right; }
th { background: #f3f5f8; } td.text, th.text { text-align: left; }
.zone-normal { color: #2e9e44; } .zone-soft { color: #b08600; }
.zone-hard { color: #d62728; } .zone-over { color: #7a0010; font-weight: 700; }
.note { color: #666; font-size: 13px; }
"""


def _row(cells: Iterable[tuple[str, object]]) -> str:
    return "<tr>" + "".join(f'<td class="{c}">{_e(v)}</td>' for c, v in cells) + "</tr>"


def session_table(sessions: list[SessionSummary]) -> str:
    head = (
        "<tr><th>session</th><th class=text>started</th><th class=text>because</th>"
        "<th>turns</th><th>prompt tokens</th><th>completion tokens</th><th>peak context</th>"
        "<th>masks (results)</th><th>compactions</th><th>wind-downs</th>"
        "<th class=text>ended</th></tr>"
    )
    rows = []
    for s in sessions:
        peak = s.peak
        peak_text = f"{peak.total / max(1, peak.limit):.0%} ({peak.total:,})" if peak else "-"
        cells: list[tuple[str, object]] = [
            ("", s.number),
            ("text", s.started[:19].replace("T", " ")),
            ("text", s.start_reason),
            ("", len(s.calls)),
            ("", f"{s.prompt_tokens:,}"),
            ("", f"{s.completion_tokens:,}"),
            (f"zone-{peak.zone}" if peak else "", peak_text),
            ("", f"{s.masks} ({s.masked_results})"),
            ("", s.compactions),
            ("", s.wind_downs),
            ("text", " → ".join(s.ends) or "(still open)"),
        ]
        rows.append(_row(cells).replace("<tr>", '<tr class="session">', 1))
    return f'<table id="sessions">{head}{"".join(rows)}</table>'


def notable_table(events: list[dict[str, Any]]) -> str:
    chosen = [
        e
        for e in events
        if e.get("kind") in NOTABLE or (e.get("kind") == "run_end" and e.get("reason") == "error")
    ]
    if not chosen:
        return '<p class="note">No errors, warnings, retries, overflows or blocked commands.</p>'
    rows = [
        _row(
            [
                ("text", str(e.get("ts", ""))[:19].replace("T", " ")),
                ("text", e.get("kind")),
                ("", e.get("session", "")),
                ("text", _event_text(e)),
            ]
        )
        for e in chosen[-MAX_NOTABLE_ROWS:]
    ]
    more = len(chosen) - MAX_NOTABLE_ROWS
    note = f'<p class="note">{more} earlier ones left out.</p>' if more > 0 else ""
    head = (
        "<tr><th class=text>time (UTC)</th><th class=text>kind</th><th>session</th>"
        "<th class=text>what</th></tr>"
    )
    return f'{note}<table id="notable">{head}{"".join(rows)}</table>'


def _event_text(e: dict[str, Any]) -> str:
    skip = {"v", "seq", "ts", "kind", "session", "message"}
    fields = ", ".join(f"{k}={v}" for k, v in e.items() if k not in skip)
    message = str(e.get("message", ""))
    return f"{message} {fields}".strip()[:400]


def _thousands(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def _summary(data: RunData) -> str:
    nothing: dict[str, Any] = {}
    first = next((e for e in data.events if e["kind"] == "run_start"), nothing)
    window = next((e for e in reversed(data.events) if e["kind"] == "context_window"), nothing)
    end = next((e for e in reversed(data.events) if e["kind"] == "run_end"), None)
    prompt = sum(c.prompt for c in data.calls)
    completion = sum(c.completion for c in data.calls)
    span = ""
    if data.calls:
        seconds = (
            datetime.fromisoformat(data.calls[-1].ts) - datetime.fromisoformat(data.calls[0].ts)
        ).total_seconds()
        span = f" in {duration(seconds)}"
    items = [
        ("model", first.get("model", "?")),
        (
            "window",
            f"{_thousands(window.get('context_limit'))} tokens ({window.get('server', '?')})",
        ),
        ("model calls", f"{len(data.calls):,}{span}"),
        ("sessions", f"{len(data.sessions)} ({max(0, len(data.sessions) - 1)} restarts)"),
        ("tokens", f"{prompt:,} prompt + {completion:,} completion"),
        ("ended", f"{end.get('reason')}" if end else "not yet"),
    ]
    return "<p class=meta>" + " · ".join(f"{_e(k)} <b>{_e(v)}</b>" for k, v in items) + "</p>"


def page(data: RunData, lines: Lines) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>ouroboros run report: {_e(data.state_dir)}</title>
<style>{CSS}</style></head>
<body>
<h1>ouroboros run report</h1>
<p class=note>{_e(data.state_dir)}</p>
{_summary(data)}
<h2>Context used per model call</h2>
<figure id="context-chart">{chart_svg(data, lines)}</figure>
<p class=note>The lines are the harness's own: the prompt budget is the window less
{lines.max_output:,} tokens kept for the reply and a {lines.margin:.0%} safety margin; masking
starts at the soft line ({lines.soft:.0%} of the budget), wind-down at the hard line
({lines.hard:.0%}), as the run recorded them. Hover a point for its figures.</p>
<h2>Sessions</h2>
{session_table(data.sessions)}
<h2>Errors, warnings and retries</h2>
{notable_table(data.events)}
{"".join(f"<p class=note>{_e(line)}</p>" for line in data.skipped)}
</body></html>
"""


def lines_from(settings: Settings, events: list[dict[str, Any]]) -> Lines:
    c = settings.context
    recorded = {
        int(e["context_limit"]): Budget(
            int(e["context_limit"]),
            int(e["prompt_budget"]),
            int(e["soft_line"]),
            int(e["hard_line"]),
        )
        for e in events
        if e.get("kind") == "context_window" and e.get("prompt_budget")
    }
    return Lines(
        c.soft_threshold,
        c.hard_threshold,
        settings.llm.max_output_tokens,
        c.safety_margin,
        recorded,
    )


def write_report(state_dir: Path, settings: Settings, out: Path | None = None) -> Path:
    """Write the page (default `<state>/report.html`) and return where it went."""
    target = out or state_dir / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    data = load(state_dir)
    target.write_text(page(data, lines_from(settings, data.events)), encoding="utf-8")
    return target
