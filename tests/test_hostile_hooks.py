"""Hooks against what the agent writes (issue 29): a `finish` summary with a NUL or escape
sequences, or of 300 KB, still runs the hooks, with the summary printable and cut in
`OUROBOROS_SUMMARY`, whole in the JSON on stdin, and cut on the terminal; a hook that never
reads its stdin, the event's 300 KB in it, is done when it exits. Each through a whole run in
this process, the hooks real commands."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from ouroboros.model.scripted import Reply, tool
from ouroboros.operator.hooks import ENV_CHARS
from tests.conftest import Project
from tests.inprocess import Ran, run_here
from tests.test_hooks import journal_warnings
from tests.test_hostile_run import BIDI, CLIPBOARD, CSI, LINK, TITLE_CLEAR, raw_controls

SEEN = """
import json, os, sys
event = sys.stdin.read()
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"summary": os.environ["OUROBOROS_SUMMARY"], "stdin": event}) + "\\n")
"""
"""A hook that appends its `OUROBOROS_SUMMARY` and the stdin it read to the file it is given."""

BIG = "x" * 300_000


def seen(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def finish_with(project: Project, summary: str, command: list[str]) -> Ran:
    return run_here(
        project,
        [Reply(tool_calls=[tool("finish", summary=summary)])],
        hooks={"on": [{"events": ["run_end"], "command": command}]},
    )


@pytest.mark.parametrize(
    "summary",
    ["done\x00then more", f"done {TITLE_CLEAR}{CLIPBOARD}{LINK}{CSI}{BIDI}", "line\nline\r\x7f"],
    ids=["NUL", "escape sequences", "newline, CR, DEL"],
)
def test_a_summary_with_control_characters_still_runs_the_hook(
    project: Project, summary: str
) -> None:
    out = project.root / "seen.jsonl"
    ran = finish_with(project, summary, [sys.executable, "-c", SEEN, str(out)])
    assert ran.returncode == 0, ran.stderr
    assert journal_warnings(project) == []
    [hook] = seen(out)
    assert json.loads(hook["stdin"])["record"]["detail"] == summary  # exact on stdin
    assert raw_controls(hook["summary"]) == []
    assert "\n" not in hook["summary"]
    assert hook["summary"].startswith("run ended: finish (")


def test_a_300_kb_summary_runs_the_hook_cut_in_its_environment_and_whole_on_stdin(
    project: Project,
) -> None:
    out = project.root / "seen.jsonl"
    ran = finish_with(project, BIG, [sys.executable, "-c", SEEN, str(out)])
    assert ran.returncode == 0, ran.stderr
    assert journal_warnings(project) == []
    [hook] = seen(out)
    event = json.loads(hook["stdin"])
    assert event["record"]["detail"] == BIG
    assert BIG in event["summary"]
    said = hook["summary"]
    assert len(said) < ENV_CHARS + 100
    assert said.endswith("; the whole is in the JSON on stdin]")
    assert f"cut at {ENV_CHARS:,} of 300,020 characters" in said
    # The terminal's copy is cut too, with where to find the whole.
    assert len(ran.stdout) < 20_000
    assert "more characters: tail --json" in ran.stdout


LEAVES_A_CHILD = """
import subprocess, sys
child = subprocess.Popen(["sleep", "60"])  # inherits stdin, as a player or a daemon would
open(sys.argv[1], "w").write(str(child.pid))
"""


def test_a_hook_that_never_reads_its_stdin_is_done_when_it_exits(project: Project) -> None:
    """Its child still holds the stdin, which no one reads: the run neither waits for it nor
    calls the hook killed."""
    pid = project.root / "child.pid"
    try:
        ran = run_here(
            project,
            [Reply(tool_calls=[tool("finish", summary=BIG)])],
            hooks={
                "timeout_s": 5,
                "on": [
                    {
                        "events": ["run_end"],
                        "command": [sys.executable, "-c", LEAVES_A_CHILD, str(pid)],
                    }
                ],
            },
        )
        assert ran.returncode == 0, ran.stderr
        assert pid.exists()
        assert journal_warnings(project) == []
    finally:
        if pid.exists() and pid.read_text():
            os.kill(int(pid.read_text()), signal.SIGKILL)
