"""Watching a run of days: what `status`, `tail -n 50` and `report` cost at 3,000, 10,000 and
100,000 model calls, against a bare interpreter's start, and how big the report is.

A run shaped like a long real one (sessions of 25 turns: a reply with its usage, a tool start
and result, masks past the middle, a wind-down, a session end; `bench/resume.py`'s journal) is
written through the product's own `Journal` with its event log as the sink, so `journal.jsonl`,
`events.jsonl` and `token_usage.jsonl` are what a run writes. Each command then runs as people
run it, `python -m ouroboros ... --state DIR` in a fresh process: the time is the whole process
(interpreter start and imports included), the memory its peak RSS (VmHWM). A bare interpreter's
start (`python -c pass`, the same interpreter) is timed beside them, each figure the median of
`--repeat` runs taken in turn, so that the times are compared on the same machine as loaded then.

Targets: at every size, `status` at most 8 times a bare start and `tail -n 50` at most 12 times
(issue 40: a command imports what it needs; issue 16 asked `status` under 0.2 s, which a loaded
machine cannot judge), and the report under 1 MB (issue 16).

Run: .venv/bin/python bench/watch.py [--calls 3000 10000 100000] [--repeat 5] [--keep]
(a few minutes)
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from resume import write_journal
from rich.console import Console

from ouroboros.sinks.events import EventLog, Terminal

STATUS_TIMES = 8
TAIL_TIMES = 12
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


def seconds(command: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, done


def bare_start(repeat: int) -> float:
    """Seconds a bare interpreter (this one) takes to start and stop: the median."""
    return statistics.median(seconds([sys.executable, "-c", "pass"])[0] for _ in range(repeat))


def timed(repeat: int, *args: str) -> tuple[float, float, str]:
    """Seconds of the whole process (the median of `repeat` runs), its peak RSS in MB, and
    what it printed."""
    times: list[float] = []
    for _ in range(repeat):
        took, done = seconds([sys.executable, "-c", PROBE, *args])
        rss, code = done.stderr.split()[-2:]
        if code != "0":
            raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr}")
        times.append(took)
    return statistics.median(times), int(rss) / 1024, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[3_000, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command timed")
    parser.add_argument("--keep", action="store_true", help="leave the runs in /tmp")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ouroboros-watch-"))
    ok = True
    print(
        "| calls | journal | bare start | status | × bare | peak RSS | tail -n 50 | × bare "
        "| peak RSS | report | peak RSS | report size |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    try:
        for calls in args.calls:
            state = folder / f"{calls}" / ".ouroboros"
            write_run(state, calls)
            usage = sum(1 for _ in (state / "token_usage.jsonl").open("rb"))
            bare_s = bare_start(args.repeat)
            status_s, status_mb, _ = timed(args.repeat, "status", "--state", str(state))
            tail = ("tail", "-n", "50", "--state", str(state))
            tail_s, tail_mb, shown = timed(args.repeat, *tail)
            assert len(shown.splitlines()) == 50, shown[-500:]
            page = state.parent / "report.html"
            report = ("report", "--state", str(state), "--out", str(page))
            report_s, report_mb, _ = timed(1, *report)
            size = page.stat().st_size / 1e6
            journal = (state / "journal.jsonl").stat().st_size / 1e6
            status_x, tail_x = status_s / bare_s, tail_s / bare_s
            print(
                f"| {usage:,} | {journal:.0f} MB | {bare_s:.3f} s | {status_s:.3f} s | "
                f"{status_x:.1f} | {status_mb:.0f} MB | {tail_s:.3f} s | {tail_x:.1f} | "
                f"{tail_mb:.0f} MB | {report_s:.2f} s | {report_mb:.0f} MB | {size:.2f} MB |"
            )
            ok &= status_x <= STATUS_TIMES and tail_x <= TAIL_TIMES and size < REPORT_MB
            figures = {"calls": usage, "bare_s": bare_s, "status_x": status_x, "tail_x": tail_x}
            print(json.dumps(figures), file=sys.stderr)
        print(
            f"\n{'PASS' if ok else 'FAIL'}  status ≤ {STATUS_TIMES} and tail -n 50 ≤ {TAIL_TIMES} "
            f"times a bare start, report < {REPORT_MB} MB"
        )
    finally:
        if args.keep:
            print(f"runs kept in {folder}")
        else:
            shutil.rmtree(folder)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
