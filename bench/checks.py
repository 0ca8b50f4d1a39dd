"""Checks by the thousand: what a session's end and a `finish` add to a run of 5,000 operator's
tasks whose checks each take 0.1 s (`sleep 0.1`, all passing), run in this process through the
product's own confined `shell_exec`, against a fake model.

The agent lists a folder once a session for three sessions, then calls `finish`. Each session
end runs its share (`progress.session_end_checks`, the tasks checked longest ago first,
`progress.checks_at_once` at a time); `finish` runs every check. A session end's time is from
its `session_end` record to the next `session_start`; the finish's from the agent's call to
the run's end. One after another, 5,000 such checks take about 8 minutes.

Target (issue 40): a session end adds at most 60 s.

Run: .venv/bin/python bench/checks.py [--tasks 5000] [--check-s 0.1] [--at-once 4]
[--share 500]   (about four minutes at the defaults)
"""

from __future__ import annotations

import argparse
import io
import json
import math
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console

from ouroboros.ground.config_file import load_settings
from ouroboros.ground.messages import AssistantMessage, Message, ToolCall
from ouroboros.model.fake_model import FakeModel
from ouroboros.model.scripted import quick_config
from ouroboros.progress import tasks
from ouroboros.progress.records import Task
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.start import run

SESSION_END_S = 60.0
SESSIONS = 3


def agent() -> FakeModel:
    """A folder listed once a session, then `finish`."""
    calls = iter(range(1, 1000))

    def reply(messages: list[Message]) -> AssistantMessage:
        n = next(calls)
        name, arguments = ("list_dir", "{}") if n <= SESSIONS else ("finish", '{"summary": "x"}')
        return AssistantMessage(tool_calls=(ToolCall(id=f"c{n}", name=name, arguments=arguments),))

    return FakeModel(reply, 8192)


def seconds(later: dict[str, Any], earlier: dict[str, Any]) -> float:
    return (
        datetime.fromisoformat(later["ts"]) - datetime.fromisoformat(earlier["ts"])
    ).total_seconds()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--check-s", type=float, default=0.1, help="how long each check takes")
    parser.add_argument("--at-once", type=int, default=4, help="progress.checks_at_once")
    parser.add_argument("--share", type=int, default=500, help="progress.session_end_checks")
    args = parser.parse_args()
    project = Path(tempfile.mkdtemp(prefix="ouroboros-checks-"))
    try:
        (project / "workspace").mkdir()
        (project / "SYSTEM_PROMPT.md").write_text("# Purpose\nPass the operator's tasks.\n")
        config = project / "config.toml"
        config.write_text(
            quick_config(
                "http://127.0.0.1:9/v1",
                session={"max_turns": 1},
                supervisor={"max_total_turns": SESSIONS + 1},
                progress={"checks_at_once": args.at_once, "session_end_checks": args.share},
            )
        )
        settings = load_settings(config)
        check = f"sleep {args.check_s:g}"
        many = [Task(text=f"case {n}", check=check) for n in range(1, args.tasks + 1)]
        tasks.post(settings.paths.state_dir, many)
        model = agent()
        log = EventLog(settings.paths.state_dir, Terminal(Console(file=io.StringIO())))
        started = time.perf_counter()
        try:
            outcome = anyio.run(run, settings, log, model, model.info)
        finally:
            log.close()
        wall = time.perf_counter() - started
        journal = settings.paths.state_dir / "journal.jsonl"
        records = [json.loads(line) for line in journal.read_text().splitlines()]
        ends = {r["session"]: r for r in records if r["kind"] == "session_end"}
        starts = {r["session"]: r for r in records if r["kind"] == "session_start"}
        took = [seconds(starts[s + 1], ends[s]) for s in sorted(ends) if s + 1 in starts]
        at_finish = [n for n, r in enumerate(records) if r.get("when") == "finish"]
        finish_s = seconds(records[-1], records[at_finish[0] - 1]) if at_finish else math.nan
        every = math.ceil(args.tasks / args.share)
        print("| tasks | check | at once | share | session ends | finish (all) | whole run |")
        print("|---:|---:|---:|---:|---|---:|---:|")
        print(
            f"| {args.tasks:,} | {args.check_s:g} s | {args.at_once} | {args.share} "
            f"| {', '.join(f'{t:.1f} s' for t in took)} | {finish_s:.1f} s | {wall:.0f} s |"
        )
        print(
            f"each task checked at least every {every} session end(s); the run ended by "
            f"{outcome.reason}, {len(at_finish):,} checks at finish"
        )
        ok = outcome.reason == "finish" and len(took) == SESSIONS and max(took) <= SESSION_END_S
        print("target met" if ok else "TARGET MISSED")
        return 0 if ok else 1
    finally:
        shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
