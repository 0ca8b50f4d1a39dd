"""`report`: one self-contained HTML page about a run: how full the context was at every model
call, where the harness masked, wound down and restarted, and a table per session. Its text is
plain HTML a test can check; the lines are those the run recorded (its `context_window` events).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from ouroboros.context.tokens import Budget
from ouroboros.ground.config import Settings
from ouroboros.ground.errors import RunError
from ouroboros.observe.chart import Lines, chart_svg
from ouroboros.observe.describe import describe, window_source
from ouroboros.observe.overview import LONG_RUN, ZOOM_CALLS, calls_between, overview_svg
from ouroboros.observe.plan_view import plan_section
from ouroboros.observe.run_data import RunData, SessionSummary, cache_figures, load
from ouroboros.observe.shown import Cells, duration, every, table, utc
from ouroboros.observe.svg import escape

NOTABLE = (
    "error",
    "warning",
    "context_overflow",
    "silent_truncation",
    "blocked_command",
    "retry",
    "loop",
)
ROUTINE = ("truncation",)
"""Outputs cut to the cap or to the room left: counted, not listed among the errors."""
MAX_NOTABLE_ROWS = 100
MAX_SESSION_ROWS = 50


CSS = """
body { font: 14px/1.45 system-ui, sans-serif; color: #222; margin: 24px; }
svg { width: 100%; max-width: 1800px; height: auto; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.meta { color: #555; } .meta b { color: #222; }
svg text { font: 11px system-ui, sans-serif; fill: #444; }
svg .title { font-size: 12px; fill: #333; } svg .band { font-size: 12px; fill: #556; }
svg .threshold, svg .lane { font-size: 11px; font-weight: 600; }
svg .vlabel { font-size: 10px; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
svg .bad { font-size: 14px; fill: #c00; font-weight: 700; }
svg .grid { stroke: #dde1e7; } svg .axis { stroke: #444; }
svg .series { fill: none; stroke: #2a5caa; stroke-width: 1.6; }
table { border-collapse: collapse; margin-top: 8px; }
.wide { max-width: 100%; overflow-x: auto; }
th, td { padding: 4px 8px; border-bottom: 1px solid #e3e6ea; text-align: right; }
td.when { min-width: 10.5ch; }
th { background: #f3f5f8; } td.text, th.text { text-align: left; }
@media (max-width: 900px) {
  body { margin: 12px; } table { font-size: 12px; } th, td { padding: 4px 3px; }
}
.zone-normal { color: #2e9e44; } .zone-soft { color: #b08600; }
.zone-hard { color: #d62728; } .zone-over { color: #7a0010; font-weight: 700; }
.note { color: #666; font-size: 13px; }
"""


def session_table(sessions: list[SessionSummary]) -> str:
    """A row per session, narrow enough for a page of 800 pixels: the long headings' words may
    break (soft hyphens, U+00AD), a start breaks between its date and its time, a peak before
    its figures (no-break spaces, U+00A0, in them); compactions only where a session had one."""
    compacted = any(s.compactions for s in sessions)
    head = [("", "session"), ("text", "started"), ("text", "because"), ("", "turns")]
    head += [("", "prompt tokens"), ("", "com\u00adpletion tokens"), ("", "peak of budget")]
    head += [("", "cache hit"), ("", "masks (re\u00adsults)")]
    head += [("", "com\u00adpact\u00adions")] if compacted else []
    head += [("", "wind-downs"), ("text", "ended")]
    rows = []
    for s in sessions:
        peak = s.peak
        peak_text = (
            f"{peak.total / max(1, peak.budget):.0%} ({peak.total:,}\u00a0of\u00a0{peak.budget:,})"
            if peak
            else "-"
        )
        cells: Cells = [
            ("", s.number),
            ("text when", s.started[:19].replace("T", " ")),
            ("text", s.start_reason),
            ("", len(s.calls)),
            ("", f"{s.prompt_tokens:,}"),
            ("", f"{s.completion_tokens:,}"),
            (f"zone-{peak.zone}" if peak else "", peak_text),
            ("", _cache_cell(cache_figures(s.calls))),
            ("", f"{s.masks} ({s.masked_results})"),
            *([("", s.compactions)] if compacted else []),
            ("", s.wind_downs),
            ("text", " → ".join(s.ends) or "(still open)"),
        ]
        rows.append(cells)
    return table("sessions", head, rows, row_class="session")


def notable_table(events: list[dict[str, Any]]) -> str:
    """Errors, warnings, retries, overflows, loops and blocked commands, newest first, by kind;
    routine output cuts only counted."""
    chosen = [e for e in events if e.get("kind") in NOTABLE]
    routine = sum(e.get("kind") in ROUTINE for e in events)
    cuts = f"{routine:,} tool outputs were cut to the cap or to the room left (routine)."
    if not chosen:
        return (
            '<p class="note">No errors, warnings, retries, overflows, loops or blocked commands. '
            f"{cuts}</p>"
        )
    counts: dict[str, int] = {}
    for e in chosen:
        counts[str(e.get("kind"))] = counts.get(str(e.get("kind")), 0) + 1
    tally = " · ".join(f"{kind} <b>{n:,}</b>" for kind, n in sorted(counts.items()))
    rows = [
        [
            ("text", utc(e)),
            ("text", e.get("kind")),
            ("", e.get("session", "")),
            ("text", _event_text(e)),
        ]
        for e in reversed(chosen[-MAX_NOTABLE_ROWS:])
    ]
    more = len(chosen) - MAX_NOTABLE_ROWS
    note = f" The {MAX_NOTABLE_ROWS} newest are listed." if more > 0 else ""
    head = [("text", "time (UTC)"), ("text", "kind"), ("", "session"), ("text", "what")]
    summary = f'<p class="note" id="notable-counts">{tally}.{note} {cuts}</p>'
    return summary + table("notable", head, rows)


def _event_text(e: dict[str, Any]) -> str:
    """What `tail` says of it (a loop: what repeated, quoted; not its fields as Python has them),
    less its time, which has a column of its own."""
    said = describe(e, tools=True)
    return said.plain[len("00:00:00 ") :] if said is not None else str(e.get("kind"))


def _cache_cell(figures: tuple[float, float | None] | None) -> str:
    if figures is None:
        return "-"
    share, ms = figures
    return f"{share:.0%}" + (f", {ms / 1000:.1f} s prefill per call" if ms is not None else "")


def _masking(events: list[dict[str, Any]]) -> str:
    rounds = [e for e in events if e.get("kind") == "context_mask"]
    freed = sum(int(e.get("estimated_reclaimed") or 0) for e in rounds)
    results = sum(int(e.get("masked") or 0) for e in rounds)
    return f"~{freed:,} tokens ({results:,} results in {len(rounds):,} rounds)"


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
    if len(data.calls) > 1:  # from the first call to the last
        seconds = (
            datetime.fromisoformat(data.calls[-1].ts) - datetime.fromisoformat(data.calls[0].ts)
        ).total_seconds()
        # A scripted run makes its calls in less than a second: not "in 0 s".
        span = f" in {duration(seconds)}" if seconds >= 1 else " in less than a second"
    items = [
        ("model", first.get("model", "?")),
        (
            "window",
            f"{_thousands(window.get('context_limit'))} tokens ({window_source(window)})"
            if window
            else "?",
        ),
        ("model calls", f"{len(data.calls):,}{span}"),
        ("sessions", f"{len(data.sessions)} ({max(0, len(data.sessions) - 1)} restarts)"),
        ("tokens", f"{prompt:,} prompt + {completion:,} completion"),
        ("prompt cache", _cache_cell(cache_figures(data.calls))),
        ("masking freed", _masking(data.events)),
        ("ended", f"{end.get('reason')}" if end else "not yet"),
    ]
    return (
        "<p class=meta>" + " · ".join(f"{escape(k)} <b>{escape(v)}</b>" for k, v in items) + "</p>"
    )


def page(data: RunData, lines: Lines, session: int | None = None) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>ouroboros run report: {escape(data.state_dir)}</title>
<style>{CSS}</style></head>
<body>
<h1>ouroboros run report</h1>
<p class=note>{escape(data.state_dir)}</p>
{_summary(data)}
{_charts(data, lines, session)}
<p class=note>The lines are the harness's own: the prompt budget is the window less
{lines.max_output:,} tokens kept for the reply and a {lines.margin:.0%} safety margin; masking
starts at the soft line ({lines.soft:.0%} of the budget), wind-down at the hard line in force
(at most {lines.hard:.0%}, lower where the run placed it from the size of its replies), as the
run recorded them call by call. Hover a point for its figures.</p>
<h2>Sessions</h2>
{_sessions(data.sessions)}
<h2>The plan</h2>
{plan_section(data.events)}
{_features(data)}<h2>Errors, warnings and retries</h2>
{notable_table(data.events)}
{"".join(f"<p class=note>{escape(line)}</p>" for line in data.skipped)}
</body></html>
"""


def _features(data: RunData) -> str:
    """Each feature's section (`observe/shown.py`): checkpoints, what the operator did."""
    said = []
    for feature in every():
        if feature.report:
            head, section = feature.report
            said.append(f"<h2>{head}</h2>\n{section(data.events)}\n")
        elif feature.report_of_state:
            head, of_state = feature.report_of_state
            said.append(f"<h2>{head}</h2>\n{of_state(data.state_dir)}\n")
    return "".join(said)


def _charts(data: RunData, lines: Lines, session: int | None = None) -> str:
    if session is not None:
        mine = [c.index for c in data.calls if c.session == session]
        if not mine:
            raise RunError(f"no model call of session {session} in this run")
        first, last = mine[0], mine[-1] + 1
        zoom = chart_svg(calls_between(data, first, last), lines, first)
        return f'<h2>Session {session}</h2>\n<figure id="context-chart">{zoom}</figure>'
    if len(data.calls) <= LONG_RUN:
        return (
            "<h2>Context used per model call</h2>\n"
            f'<figure id="context-chart">{chart_svg(data, lines)}</figure>'
        )
    first = max(0, len(data.calls) - ZOOM_CALLS)
    zoom = chart_svg(calls_between(data, first, len(data.calls)), lines, first)
    return (
        "<h2>Context used across the run</h2>\n"
        f'<figure id="overview-chart">{overview_svg(data, lines)}</figure>\n'
        f"<h2>The last {ZOOM_CALLS} model calls</h2>\n"
        f'<figure id="context-chart">{zoom}</figure>'
    )


def _sessions(sessions: list[SessionSummary]) -> str:
    more = len(sessions) - MAX_SESSION_ROWS
    if more <= 0:
        return session_table(sessions)
    shown = sessions[-MAX_SESSION_ROWS:]
    turns = sum(len(s.calls) for s in sessions[:more])
    tokens = sum(s.prompt_tokens + s.completion_tokens for s in sessions[:more])
    note = (
        f'<p class="note">The {MAX_SESSION_ROWS} newest of {len(sessions):,} sessions; the '
        f"{more:,} before them made {turns:,} model calls with {tokens:,} tokens.</p>"
    )
    return note + session_table(shown)


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


def write_report(
    state_dir: Path, settings: Settings, out: Path | None = None, session: int | None = None
) -> Path:
    """Write the page (default `<state>/report.html`, or `report-session-N.html` for a zoom on
    one session) and return where it went."""
    name = "report.html" if session is None else f"report-session-{session}.html"
    target = out or state_dir / name
    data = load(state_dir)
    text = page(data, lines_from(settings, data.events), session)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target
