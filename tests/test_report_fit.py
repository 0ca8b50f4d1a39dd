"""The report as a person sees it: labels no line crosses, a header true of a run shorter than
a second (the page's width in a browser is in test_report_demo.py)."""

from __future__ import annotations

import re
from pathlib import Path

from ouroboros.observe.chart import Lines, chart_svg
from ouroboros.observe.report import page
from ouroboros.observe.run_data import Call, Mark, RunData, SessionSummary

LINES = Lines(0.7, 0.9, 256, 0.05)


def run(seconds: list[float]) -> RunData:
    """Calls at these seconds past a minute, a session of 10 each; a wind-down before each
    session's last call and a restart between two sessions."""
    calls = [
        Call(
            i,
            1 + i // 10,
            1 + i % 10,
            f"2026-11-29T10:00:{s:06.3f}+00:00",
            900 + 200 * (i % 10),
            30,
            4096,
            "normal",
            "server",
            budget=3636,
        )
        for i, s in enumerate(seconds)
    ]
    sessions = [
        SessionSummary(n + 1, calls[10 * n : 10 * n + 10], calls[10 * n].ts, "fresh")
        for n in range((len(calls) + 9) // 10)
    ]
    marks = [Mark(10 * n + 8.5, "wind_down", "wind-down") for n in range(len(sessions))]
    marks += [
        Mark(10 * n - 0.5, "session_restart", f"restart {n}") for n in range(1, len(sessions))
    ]
    return RunData(
        Path("project/.ouroboros"), calls, sessions, sorted(marks, key=lambda m: m.x), [], []
    )


def test_a_run_shorter_than_a_second_is_not_said_to_take_0_s() -> None:
    short = page(run([i * 0.02 for i in range(20)]), LINES)
    assert "model calls <b>20 in less than a second</b>" in short
    longer = page(run([i * 2.0 for i in range(20)]), LINES)
    assert "model calls <b>20 in 38 s</b>" in longer


def test_the_lines_labels_are_drawn_over_every_line_on_a_halo() -> None:
    """They were drawn with their own lines, under the next ones, the window's and the budget's
    lines crossing them; now after every line and point, on a halo the page's CSS gives them."""
    svg = chart_svg(run([i * 2.0 for i in range(30)]), LINES)
    labels = [m.start() for m in re.finditer(r'class="vlabel"', svg)]
    assert len(labels) == 5  # three wind-downs, two restarts
    drawn = [m.start() for m in re.finditer(r"<(line|polyline|circle|path|rect) ", svg)]
    assert min(labels) > max(i for i in drawn if i < svg.index("<g "))
    css = page(run([i * 2.0 for i in range(30)]), LINES)
    assert re.search(r"svg \.vlabel \{[^}]*paint-order: stroke; stroke: #fff", css)


def test_a_label_at_the_left_edge_stands_right_of_its_line() -> None:
    """A restart at the chart's first call: its label would cross the axis and its numbers."""
    data = run([i * 2.0 for i in range(20)])
    data.marks[:] = [Mark(-0.5, "session_restart", "restart 1")]
    svg = chart_svg(data, LINES)
    line = re.search(r'<line x1="([\d.]+)"[^>]*stroke="#6a3d9a"', svg)
    label = re.search(r'translate\(([\d.]+),[\d.]+\) rotate\(-90\)[^>]*class="vlabel"', svg)
    assert line is not None
    assert label is not None
    assert float(label[1]) > float(line[1]) + 8
