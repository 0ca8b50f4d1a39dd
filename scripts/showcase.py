"""docs/report-10k.png made again: a run of 10,000 model calls written into a named folder as a
run writes it (bench/resume.py's run: 400 sessions of 25 calls, through the product's `Journal`
and event log), ended at its turn limit, its `report` opened in headless Chromium.

    .venv/bin/python scripts/showcase.py [--dir /tmp/ouroboros-10k] [--out docs/report-10k.png]

The folder's name is in the page's header, so it is one a person would give; it must not exist.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from ouroboros.cli import main as ouroboros
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.state.journal import Journal
from ouroboros.state.records import EndReason, RunEnd

ROOT = Path(__file__).resolve().parents[1]
CALLS = 10_000


def write_run(state: Path) -> None:
    """The bench's long run, then its end, each record through the event log as a run's is."""
    spec = importlib.util.spec_from_file_location("resume", ROOT / "bench" / "resume.py")
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    state.mkdir(parents=True)
    log = EventLog(state, Terminal(Console(file=io.StringIO())))
    try:
        bench.write_journal(state / "journal.jsonl", 3 * CALLS, sinks=log.sinks())
        journal = Journal(state / "journal.jsonl", durable=False)
        journal.sinks.extend(log.sinks())
        journal.append(RunEnd(reason=EndReason.MAX_TOTAL_TURNS, detail=f"{CALLS:,} model calls"))
        journal.close()
    finally:
        log.close()


def screenshot(page: Path, png: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("chromium is not installed: apt-get install chromium")
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={tempfile.mkdtemp()}",
            f"--screenshot={png}",
            "--window-size=1200,1250",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=90,
        check=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/ouroboros-10k"))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report-10k.png")
    args = parser.parse_args()
    if args.dir.exists():
        sys.exit(f"{args.dir} exists: name a new folder (--dir), or remove it first")
    state = args.dir / ".ouroboros"
    write_run(state)
    if ouroboros(["report", "--state", str(state)]) != 0:
        sys.exit("report failed")
    screenshot(state / "report.html", args.out)
    print(f"{args.out} written from the run in {state}")


if __name__ == "__main__":
    main()
