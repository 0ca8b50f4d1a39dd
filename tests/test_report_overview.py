"""The report's overview of a run past `LONG_RUN` calls, in this process (the fast tier's;
tests/test_report_long.py looks at a 10,000-call run, in a browser too)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from ouroboros.ground.config import Settings
from ouroboros.observe.overview import LONG_RUN
from ouroboros.observe.report import write_report
from ouroboros.sinks.events import EventLog, Terminal
from tests.conftest import PROJECT_ROOT, load_module


def test_a_run_past_long_run_calls_is_drawn_as_an_overview(tmp_path: Path) -> None:
    state = tmp_path / ".ouroboros"
    state.mkdir()
    log = EventLog(state, Terminal(Console(file=io.StringIO())))
    try:
        resume = load_module(PROJECT_ROOT / "bench" / "resume.py")
        resume.write_journal(state / "journal.jsonl", 3 * (LONG_RUN + 50), sinks=log.sinks())
    finally:
        log.close()
    page = write_report(state, Settings()).read_text()
    assert '<figure id="overview-chart">' in page
    overview = page[page.index('<figure id="overview-chart">') :]
    overview = overview[: overview.index("</figure>")]
    assert "wind-downs" in overview
    assert "restarts" in overview
