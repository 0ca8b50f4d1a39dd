"""`report` of a run of 10,000 model calls: an overview that reads at any length, the last calls
drawn one by one, the newest sessions and the errors; under 1 MB; and a look in a real browser,
as docs/report-10k.png shows (made by scripts/showcase.py from the same run)."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from ouroboros.observe.overview import BUCKETS, ZOOM_CALLS
from ouroboros.observe.svg import LEFT, RIGHT, W
from ouroboros.sinks.events import EventLog, Terminal
from tests.conftest import PROJECT_ROOT, load_module
from tests.test_report_demo import report

pytestmark = pytest.mark.slow  # a 10,000-call run made once for the file

CALLS = 10_000


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of 10,000 calls written as a run writes it: the journal through the product's
    `Journal`, the logs through its `EventLog` (bench/resume.py's run: 400 sessions)."""
    state = tmp_path_factory.mktemp("long") / ".ouroboros"
    state.mkdir()
    log = EventLog(state, Terminal(Console(file=io.StringIO())))
    try:
        resume = load_module(PROJECT_ROOT / "bench" / "resume.py")
        resume.write_journal(state / "journal.jsonl", 3 * CALLS, sinks=log.sinks())
    finally:
        log.close()
    return state


def svg(page: str, figure: str) -> ET.Element:
    start = page.index(f'<figure id="{figure}">')
    body = page[page.index("<svg", start) : page.index("</svg>", start) + len("</svg>")]
    return ET.fromstring(body)


def test_the_report_of_a_long_run_reads_and_stays_small(long_run: Path) -> None:
    page = report(long_run)
    assert len(page.encode()) < 1_000_000
    # The overview spans the whole run: buckets from the first call to the last.
    overview = svg(page, "overview-chart")
    ns = "{http://www.w3.org/2000/svg}"
    mean = overview.find(f"{ns}polyline")
    assert mean is not None
    xs = [float(p.split(",")[0]) for p in mean.attrib["points"].split()]
    assert len(xs) == BUCKETS
    assert xs[0] < LEFT + 5
    assert xs[-1] > W - RIGHT - 5
    assert xs == sorted(xs)
    titles = [t.text or "" for t in overview.iter(f"{ns}title")]
    assert "399 × restart" in titles
    assert "wind-down" in " ".join(titles)
    # The zoom draws the last calls one by one, numbered from the first shown.
    zoom = svg(page, "context-chart")
    assert len([c for c in zoom.iter(f"{ns}circle") if c.find(f"{ns}title") is not None]) == (
        ZOOM_CALLS
    )
    assert f"The last {ZOOM_CALLS} model calls" in page
    # The newest sessions only, the others summed up.
    rows = re.findall(r'<tr class="session">', page)
    assert len(rows) == 50
    assert "The 50 newest of 400 sessions; the 350 before them made 8,750 model calls" in page


def test_the_overview_ticks_stay_apart_and_count_every_event(long_run: Path) -> None:
    """400 restarts in 700 pixels: each kind of event in a lane of its own, its ticks at least
    4 pixels apart (a comb, not a band), each naming how many events it stands for."""
    overview = svg(report(long_run), "overview-chart")
    ns = "{http://www.w3.org/2000/svg}"
    lanes = {}
    for lane in overview.iter(f"{ns}g"):
        title = lane.find(f"{ns}title")
        if title is None:
            continue  # the legend's
        total, name = (title.text or "").split(" × ")
        ticks = lane.findall(f"{ns}rect")
        xs = sorted(float(tick.attrib["x"]) for tick in ticks)
        assert all(b - a >= 4 for a, b in zip(xs, xs[1:], strict=False)), name
        counts = [(tick.find(f"{ns}title").text or "").split(": ")[1] for tick in ticks]  # type: ignore[union-attr]
        assert sum(int(c.split(" × ")[0]) for c in counts) == int(total.replace(",", ""))
        lanes[name] = int(total.replace(",", ""))
    assert lanes == {"restart": 399, "wind-down": 400}
    labels = {t.text for t in overview.iter(f"{ns}text") if t.attrib.get("class") == "lane"}
    assert labels == {"399 restarts", "400 wind-downs"}


def test_the_report_of_a_long_run_in_a_browser(long_run: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    report(long_run)
    png = tmp_path / "r.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tempfile.mkdtemp()}",
            f"--screenshot={png}",
            "--window-size=1200,1250",
            (long_run / "report.html").as_uri(),
        ],
        capture_output=True,
        timeout=90,
        check=True,
    )
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 1250)
    assert len(data) > 100_000  # two drawn charts and a table, not a blank page


def test_a_page_on_one_session_of_a_long_run(long_run: Path) -> None:
    """`report --session N`: that session's calls drawn one by one, numbered as in the run."""
    page = report(long_run, "--session", "123")
    assert (long_run / "report-session-123.html").exists()
    zoom = svg(page, "context-chart")
    ns = "{http://www.w3.org/2000/svg}"
    dots = [c for c in zoom.iter(f"{ns}circle") if c.find(f"{ns}title") is not None]
    assert len(dots) == 25  # the sessions of this run have 25 turns
    titles = [(c.find(f"{ns}title").text or "") for c in dots]  # type: ignore[union-attr]
    assert all(" session 123 " in t for t in titles)
    assert titles[0].startswith(f"call {122 * 25 + 1:,}:")
    assert "<h2>Session 123</h2>" in page
    assert "masking freed" in page


def test_a_page_on_a_session_that_is_not_there(long_run: Path) -> None:
    from ouroboros.cli import main

    assert main(["report", "--state", str(long_run), "--session", "9999"]) == 1


@pytest.mark.parametrize("figure", ["overview-chart", "context-chart"])
def test_the_labels_of_the_lines_do_not_overlap(
    long_run: Path, figure: str, tmp_path: Path
) -> None:
    """The hard line in force can sit just above the soft line (a run of long replies places
    it low): their labels are pushed apart, the 11-px text a line apart, in both charts."""
    state = tmp_path / ".ouroboros"
    shutil.copytree(long_run, state)
    usage = state / "token_usage.jsonl"
    lines = usage.read_text().splitlines()
    last = json.loads(lines[-1])
    last["hard_line"] = last["soft_line"] + 5
    usage.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    chart = svg(report(state), figure)
    ns = "{http://www.w3.org/2000/svg}"
    ys = sorted(
        float(t.attrib["y"])
        for t in chart.iter(f"{ns}text")
        if "threshold" in t.attrib.get("class", "")
    )
    assert len(ys) == 4
    assert all(b - a >= 13 for a, b in zip(ys, ys[1:], strict=False))
