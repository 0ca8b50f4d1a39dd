"""Watching a run of days: what `status`, `tail -n 50` and `report` cost at 10,000 and 100,000
model calls, and how big the report is.

A run shaped like a long real one (sessions of 25 turns: a reply with its usage, a tool start
and result, masks past the middle, a wind-down, a session end; `bench/resume.py`'s journal) is
written through the product's own `Journal` with its event log as the sink, so `journal.jsonl`,
`events.jsonl` and `token_usage.jsonl` are what a run writes. Each command then runs as people
run it, `python -m ouroboros ... --state DIR` in a fresh process: the time is the whole process
(interpreter start and imports included), the memory its peak RSS (VmHWM).

Targets (issue 16): `status` under 0.2 s and the report under 1 MB, at both sizes.

Run: .venv/bin/python bench/watch.py [--calls 10000 100000] [--keep]   (a few minutes)
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from resume import write_journal
from rich.console import Console

from ouroboros.sinks.events import EventLog, Terminal

STATUS_S = 0.2
REPORT_MB = 1.0

PROBE = """
import sys
from ouroboros.cli import main
code = main(sys.argv[1:])
# VmHWM, not ru_maxrss: Linux keeps the parent's ru_maxrss across fork and exec.
peak = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(peak, code, file=sys.stderr)
"""


def write_run(state: Path, calls: int) -> None:
    state.mkdir(parents=True)
    log = EventLog(state, Terminal(Console(file=io.StringIO())))
    try:
        write_journal(state / "journal.jsonl", 3 * calls, sinks=log.sinks())
    finally:
        log.close()


def timed(*args: str) -> tuple[float, float, str]:
    """Seconds of the whole process, its peak RSS in MB, and what it printed."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    rss, code = done.stderr.split()[-2:]
    if code != "0":
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr}")
    return seconds, int(rss) / 1024, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--keep", action="store_true", help="leave the runs in /tmp")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ouroboros-watch-"))
    ok = True
    print(
        "| calls | journal | status | peak RSS | tail -n 50 | peak RSS | report | peak RSS "
        "| report size |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    try:
        for calls in args.calls:
            state = folder / f"{calls}" / ".ouroboros"
            write_run(state, calls)
            usage = sum(1 for _ in (state / "token_usage.jsonl").open("rb"))
            status_s, status_mb, _ = timed("status", "--state", str(state))
            tail_s, tail_mb, shown = timed("tail", "-n", "50", "--state", str(state))
            assert len(shown.splitlines()) == 50, shown[-500:]
            page = state.parent / "report.html"
            report_s, report_mb, _ = timed("report", "--state", str(state), "--out", str(page))
            size = page.stat().st_size / 1e6
            journal = (state / "journal.jsonl").stat().st_size / 1e6
            print(
                f"| {usage:,} | {journal:.0f} MB | {status_s:.2f} s | {status_mb:.0f} MB | "
                f"{tail_s:.2f} s | {tail_mb:.0f} MB | {report_s:.2f} s | {report_mb:.0f} MB | "
                f"{size:.2f} MB |"
            )
            ok &= status_s < STATUS_S and size < REPORT_MB
            print(json.dumps({"calls": usage, "status_s": status_s}), file=sys.stderr)
        print(f"\n{'PASS' if ok else 'FAIL'}  status < {STATUS_S} s and report < {REPORT_MB} MB")
    finally:
        if args.keep:
            print(f"runs kept in {folder}")
        else:
            shutil.rmtree(folder)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
