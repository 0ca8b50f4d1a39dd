"""`demo` runs the real harness end to end; `report` draws what it (or any run) recorded."""

from __future__ import annotations

import contextlib
import io
import json
import re
import secrets
import shutil
import string
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from ouroboros.cli import main
from ouroboros.context.tokens import Budget
from tests.conftest import PROJECT_ROOT, Project

SVG = "{http://www.w3.org/2000/svg}"


@dataclass(frozen=True)
class Demo:
    root: Path
    output: str
    exit_code: int

    @property
    def project(self) -> Project:
        return Project(self.root)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    root = tmp_path_factory.mktemp("demo")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["demo", "--dir", str(root)])
    return Demo(root, out.getvalue(), code)


@pytest.mark.slow
def test_demo_runs_the_harness_through_masking_wind_down_and_restarts(demo: Demo) -> None:
    assert demo.exit_code == 0, demo.output
    project = demo.project
    assert len(project.events("session_restart")) == 2
    assert len(project.events("checkpoint")) == 3
    assert len(project.events("plan")) == 1
    assert project.events("context_mask")
    assert len(project.events("wind_down")) >= 2
    assert project.events("run_end")[-1]["reason"] == "max_restarts"
    # The terminal shows what `tail` shows, then where to look.
    call = r"s1 t1 +█+[░┊]+ +\d+% normal +prompt [\d,]+ \+ out \d+ of 3,636 \(server\)"
    assert re.search(call, demo.output)
    assert re.search(r"restart 2: session 3 after \d+ turns", demo.output)
    assert "run stopped: max_restarts" in demo.output
    # Where to look, from the project's folder (its config.toml names the state folder), with
    # the interpreter that ran it: a bare `python` outside the venv lacks the package.
    assert f"\n  cd {demo.root}\n  {sys.executable} -m ouroboros tail\n" in demo.output
    assert f"\n  {sys.executable} -m ouroboros report\n" in demo.output
    # The server is named for what it is: a scripted one that answers as llama-server does.
    assert "window 4,096 tokens (scripted server, as llama-server /props n_ctx)" in demo.output
    # The scripted agent did real work in its workspace: notes saved at each wind-down.
    assert "module reads so far" in (project.workspace / "NOTES.md").read_text()
    assert len(list((project.workspace / "notes").glob("*.md"))) >= 3
    assert (project.workspace / "src" / "parser.py").exists()


README_DEMO = "/tmp/ouroboros-demo"
"""Where the README's demo runs: a person's folder, which the tests never touch."""


def twin_of(path: str) -> Path:
    """A new folder whose path has the same length and the same words as `path` but its last
    (`/tmp/ouroboros-qfxa` for `/tmp/ouroboros-demo`): the path is in the agent's prompt, so
    its twin gives the same token counts and sizes as the README's folder."""
    head, _, last = path.rpartition("-")
    for _ in range(100):
        # Lower-case letters only, as in "demo": the token estimate counts a digit as a token.
        twin = Path(f"{head}-{''.join(secrets.choice(string.ascii_lowercase) for _ in last)}")
        with contextlib.suppress(FileExistsError):
            twin.mkdir()
            return twin
    raise FileExistsError(f"no free twin of {path}")


@pytest.mark.slow
def test_the_readme_shows_what_the_demo_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's sample is a real demo run's output in a terminal of 120 columns: its lines,
    in order, with the times and the interpreter as this run has them (`...` leaves lines out).
    The demo runs in the folder the README names, or one of its twins: its path is in the
    agent's prompt, and so in every token count."""
    monkeypatch.setenv("COLUMNS", "120")
    out = io.StringIO()
    root = twin_of(README_DEMO)
    try:
        with contextlib.redirect_stdout(out):
            assert main(["demo", "--dir", str(root)]) == 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
    readme = (PROJECT_ROOT / "README.md").read_text()
    start = readme.index("```\nouroboros demo: a scripted agent")
    sample = readme[start + 4 : readme.index("```", start + 4)].splitlines()

    def plain(line: str) -> str:
        # A checkpoint's commit id has the time in it: every run's is another.
        line = re.sub(r"\(commit [0-9a-f]+\)", "(commit …)", line)
        return re.sub(r"^\d\d:\d\d:\d\d ", "", line).rstrip()

    printed = [
        plain(line).replace(sys.executable, ".venv/bin/python").replace(str(root), README_DEMO)
        for line in out.getvalue().splitlines()
    ]
    at = 0
    for line in (plain(line) for line in sample if line != "..."):
        assert line in printed[at:], f"README line not printed by the demo (in order): {line}"
        at = printed.index(line, at) + 1


@pytest.mark.slow
def test_demo_again_in_the_same_folder_keeps_the_first_run(demo: Demo, tmp_path: Path) -> None:
    root = tmp_path / "again"
    shutil.copytree(demo.root, root)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["demo", "--dir", str(root)]) == 0
    assert "an earlier demo run was moved aside, to .ouroboros." in out.getvalue()
    assert len([p for p in tmp_path.glob("again/.ouroboros.*") if p.is_dir()]) == 1


def report(state: Path, *extra: str) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["report", "--state", str(state), *extra]) == 0
    written = Path(err.getvalue().split("report written to ")[1].strip())
    return written.read_text()


def chart(page: str) -> ET.Element:
    svg = page[page.index("<svg") : page.index("</svg>") + len("</svg>")]
    return ET.fromstring(svg)  # well-formed, or this raises


def test_report_draws_the_run(demo: Demo) -> None:
    state = demo.project.state
    page = report(state)
    assert (state / "report.html").exists()
    # Self-contained: no script, nothing fetched (the SVG namespace is a name, not a fetch).
    assert "<script" not in page
    assert not re.search(r"(src|href)=", page)
    svg = chart(page)
    usage = demo.project.usage()
    # One dot per model call, in its zone's colour, and one line per session.
    dots = svg.findall(f"{SVG}circle")
    assert len([d for d in dots if d.find(f"{SVG}title") is not None]) == len(usage)
    assert len(svg.findall(f"{SVG}polyline")) == 3
    # The harness's own lines, at the harness's own values (the demo reserves 256 tokens).
    budget = Budget.for_window(4096, 0.70, 0.90, 256, 0.05)
    labels = [t.text for t in svg.iter(f"{SVG}text") if t.text]
    assert f"soft 70%: {budget.soft_line:,}" in labels
    # The hard line as it was in force at the last call: at most the configured one.
    in_force = usage[-1]["hard_line"]
    assert in_force <= budget.hard_line
    assert f"hard {in_force / budget.prompt_budget:.0%}: {in_force:,}" in labels
    # The wind-down line is placed from the run's own reply sizes, never after the hard line.
    assert all(0 < w["hard_line"] <= budget.hard_line for w in demo.project.events("wind_down"))
    assert f"prompt budget {budget.prompt_budget:,}" in labels
    assert "window 4,096" in labels
    # Masks, wind-downs and restarts are marked; sessions are labelled bands.
    titles = [t.text or "" for t in svg.iter(f"{SVG}title")]
    assert sum(t.startswith("masked ") for t in titles) == len(demo.project.events("context_mask"))
    assert sum(t.startswith("wind-down") for t in titles) == len(demo.project.events("wind_down"))
    assert sum(t.startswith("restart ") for t in titles) == 2
    assert {"session 1", "session 2", "session 3"} <= set(labels)


def test_report_has_a_row_per_session(demo: Demo) -> None:
    page = report(demo.project.state)
    rows = re.findall(r'<tr class="session">(.*?)</tr>', page)
    assert len(rows) == 3
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]
    usage = demo.project.usage()
    for number, row in enumerate(cells, start=1):
        mine = [u for u in usage if u["session"] == number]
        assert row[0] == str(number)
        assert row[3] == str(len(mine))
        assert row[4] == f"{sum(u['prompt_tokens'] for u in mine):,}"
        assert row[5] == f"{sum(u['completion_tokens'] for u in mine):,}"
        assert row[-1].startswith("context_full (")
    assert [row[2] for row in cells] == ["fresh", "context_full", "context_full"]


def test_report_of_a_torn_copy_and_to_another_file(demo: Demo, tmp_path: Path) -> None:
    state = tmp_path / ".ouroboros"
    shutil.copytree(demo.project.state, state)
    with (state / "token_usage.jsonl").open("a") as f:
        f.write('{"v":1,"ts":"2099-01-01T00:00:00.000+00:00","kind":"token_us')
    out = tmp_path / "elsewhere" / "run.html"
    page = report(state, "--out", str(out))
    assert out.exists()
    assert len(re.findall(r'<tr class="session">', page)) == 3
    assert len(chart(page).findall(f"{SVG}polyline")) == 3
    # The next run appends after the torn line: a bad line mid-file is skipped, and said so.
    with (state / "token_usage.jsonl").open("a") as f:
        f.write(json.dumps(demo.project.usage()[-1]) + "\n")
    page = report(state)
    assert "not a JSON object; skipped (the file keeps it)" in page
    assert len(re.findall(r'<tr class="session">', page)) == 3


def test_report_before_any_model_call(tmp_path: Path) -> None:
    state = tmp_path / ".ouroboros"
    state.mkdir()
    (state / "events.jsonl").write_text(
        json.dumps({"v": 1, "ts": "2026-01-01T00:00:00.000+00:00", "kind": "run_start"}) + "\n"
    )
    page = report(state)
    assert "No model call recorded yet." in page
    assert "<svg" not in page


@pytest.mark.slow
def test_report_renders_in_a_browser(demo: Demo, tmp_path: Path) -> None:
    report(demo.project.state)
    png = tmp_path / "report.png"
    subprocess.run(
        [
            browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tempfile.mkdtemp()}",
            f"--screenshot={png}",
            "--window-size=1200,900",
            (demo.project.state / "report.html").as_uri(),
        ],
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000  # a drawn chart, not a blank page


MEASURE = """<script>
const wide = [...document.querySelectorAll('.wide')].filter(b => b.scrollWidth > b.clientWidth);
document.body.dataset.measured = JSON.stringify({
  page: document.documentElement.scrollWidth, room: document.documentElement.clientWidth,
  scrolled: wide.map(b => b.firstElementChild.id)});
</script></body>"""
"""Added to a copy of the page (the report itself has no script): its width in the browser."""


def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("pixels", [800, 1200])
def test_the_report_fits_the_page_in_a_browser(demo: Demo, tmp_path: Path, pixels: int) -> None:
    """At 800 pixels the sessions table ran off the page (and at 1,200 too): the page is no
    wider than the window, and no table needs its box's scroll bar."""
    measured = tmp_path / "measured.html"
    measured.write_text(report(demo.project.state).replace("</body>", MEASURE))
    dom = subprocess.run(
        [
            browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tempfile.mkdtemp()}",
            f"--window-size={pixels},900",
            "--dump-dom",
            measured.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    found = re.search(r'data-measured="([^"]*)"', dom)
    assert found is not None, dom[-2000:]
    width = json.loads(found[1].replace("&quot;", '"'))
    assert width["page"] <= width["room"] <= pixels, width
    assert width["scrolled"] == [], width


def test_a_compaction_side_call_is_counted_but_not_plotted(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / ".ouroboros"
    shutil.copytree(demo.project.state, state)
    last = demo.project.usage()[-1]
    side = {**last, "ts": "2099-01-01T00:00:00.000+00:00", "purpose": "compaction"}
    side.update(prompt_tokens=1000, completion_tokens=200, total_tokens=1200)
    compaction = {
        "v": 1,
        "ts": "2099-01-01T00:00:00.001+00:00",
        "kind": "compaction",
        "session": 3,
        "forced": False,
        "messages_replaced": 12,
        "projected_before": 3400,
        "projected_after": 1900,
    }
    with (state / "token_usage.jsonl").open("a") as f:
        f.write(json.dumps(side) + "\n")
    with (state / "events.jsonl").open("a") as f:
        f.write(json.dumps(compaction) + "\n")
    page = report(state)
    svg = chart(page)
    dots = [d for d in svg.findall(f"{SVG}circle") if d.find(f"{SVG}title") is not None]
    assert len(dots) == len(demo.project.usage())
    titles = [t.text or "" for t in svg.iter(f"{SVG}title")]
    assert "compacted 12 messages: ~3400 -> ~1900" in titles
    row = re.findall(r"<td[^>]*>(.*?)</td>", re.findall(r'<tr class="session">(.*?)</tr>', page)[2])
    mine = [u for u in demo.project.usage() if u["session"] == 3]
    assert row[3] == str(len(mine))
    assert row[4] == f"{sum(u['prompt_tokens'] for u in mine) + 1000:,}"
    assert row[9] == "1"
    assert main(["tail", "--state", str(state)]) == 0
    out = capsys.readouterr().out
    assert "[compaction] " in out
    assert "compacted 12 old messages into a recap: next prompt ~3,400 -> ~1,900" in out


def test_every_percentage_of_the_context_is_of_the_prompt_budget(demo: Demo) -> None:
    """The sessions table, the dots' titles and the lines' labels divide by the prompt budget,
    as the terminal, `tail` and `status` do (never by the window)."""
    page = report(demo.project.state)
    usage = demo.project.usage()
    budget = usage[-1]["prompt_budget"]
    assert budget < usage[-1]["context_limit"]
    rows = re.findall(r'<tr class="session">(.*?)</tr>', page)
    for number, row in enumerate(rows, start=1):
        peak = max(u["total_tokens"] for u in usage if u["session"] == number)
        # No-break spaces in the figures: a narrow page breaks the cell before them alone.
        assert f">{peak / budget:.0%} ({peak:,} of {budget:,})<" in row.replace("\u00a0", " ")
    titles = [t.text or "" for t in chart(page).iter(f"{SVG}title") if "tokens (" in (t.text or "")]
    assert len(titles) == len(usage)
    for title, u in zip(titles, usage, strict=True):
        # Of the budget exactly: the journal's `fraction` is rounded, and may round the other way.
        share = u["total_tokens"] / budget
        assert f"{u['total_tokens']:,} of {budget:,} tokens ({share:.0%}," in title


@pytest.mark.slow
def test_simulated_prefill_times_are_not_shown_as_measured(demo: Demo) -> None:
    """The scripted server has no prefill to time: it sends no time, and no line, `status` or
    report shows one (the cache figures it does count stay)."""
    usage = demo.project.usage()
    assert all("prefill_ms" not in u and "cached_tokens" in u for u in usage)
    assert not re.search(r"processed [\d,]+ in \d", demo.output)
    status = demo.project.run("status", "--state", str(demo.project.state)).stdout
    assert "of prompt tokens cached" in status
    assert "prefill" not in status
    assert "prefill per call" not in report(demo.project.state)
