"""What the run's terminal and `tail` print: lines that fit the terminal's width (figures dropped
by priority, the tools a call ran kept), the same lines from both, the end said once."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ouroboros.cli import main
from ouroboros.observe.describe import call_line
from tests.conftest import Project

STAMPED = re.compile(r"^\d\d:\d\d:\d\d ")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder like the one the demo makes when given none (`/tmp/ouroboros-demo-8l5xk2a_`):
    its first line and its last lines name it."""
    root = Path(tempfile.mkdtemp(prefix="ouroboros-demo-", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def printed(argv: list[str]) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue().splitlines()


@pytest.mark.parametrize("columns", [120, 80])
@pytest.mark.slow
def test_the_demo_fits_the_terminal_and_tail_prints_the_same_lines(
    short_dir: Path, columns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    shown = printed(["demo", "--dir", str(short_dir)])
    commands = [line for line in shown if line.startswith(f"  {sys.executable} -m ouroboros ")]
    assert len(commands) == 3
    # Every line, its own and the commands to look at the run with included.
    too_wide = [line for line in shown if len(line) > columns]
    assert not too_wide, too_wide
    calls = [line for line in shown if re.search(r" s\d t\d+ ", line)]
    assert len(calls) >= 15
    # Every call line names the tools its reply called, however narrow the terminal.
    assert all(
        re.search(r"  · (plan|file_read|file_write|shell_exec) (ok|exit 0)$", c) for c in calls
    )
    # `tail` prints the lines the run's terminal did, one for one.
    state = short_dir / ".ouroboros"
    tail = printed(["tail", "--state", str(state)])
    assert tail == [line for line in shown if STAMPED.match(line)]
    status = printed(["status", "--state", str(state)])
    assert max(len(line) for line in status) <= columns
    # What the lines leave out is in `status`: how tool commands run, in full.
    tools = next(e for e in Project(short_dir).events("tools") if "sandbox" in e)
    words = " ".join(w for line in status for w in line.split() if w not in "│╭╮╰╯")
    assert f"tools sandbox {tools['sandbox']}; network on; {tools['processes']};" in words
    # The end is said once.
    assert sum("run stopped" in line or "run ended" in line for line in shown) == 1


USAGE = {
    "ts": "2026-11-27T10:00:00.000+00:00",
    "kind": "token_usage",
    "session": 1,
    "turn": 2,
    "prompt_tokens": 1852,
    "completion_tokens": 23,
    "prompt_budget": 3636,
    "fraction": 0.5158,
    "zone": "normal",
    "source": "server",
    "cached_tokens": 1742,
    "processed_tokens": 110,
    "prefill_ms": 300.0,
    "soft_line": 2545,
    "hard_line": 2909,
}
TOOL = {"kind": "tool_call", "name": "file_read", "exit_code": None, "error": None}


def test_a_call_line_drops_its_least_figures_first() -> None:
    """In a pipe, the whole line; narrower, the prefill time goes first, then the tokens
    processed, the count's source, half the bar, the cache share, the bar, the words; the tools
    stay, and the line is cut only when all that is not enough."""
    whole = call_line(USAGE, [TOOL]).plain
    assert whole.endswith("(server) cache 94%, processed 110 in 0.3 s  · file_read ok")
    assert "█" * 12 in whole
    order = [" in 0.3 s", ", processed 110", " (server)", "█" * 7, " cache 94%", "█", "prompt "]
    for width in range(len(whole), 20, -1):
        line = call_line(USAGE, [TOOL], width).plain
        assert len(line) <= width
        gone = [part in line for part in order]
        # What is left is a prefix of the drop order reversed: nothing goes before a lesser part.
        assert gone == sorted(gone), (width, line)
        if width >= 60:
            assert line.endswith("  · file_read ok")
    assert call_line(USAGE, [TOOL], 30).plain.endswith("…")


def test_calls_with_tools_of_other_lengths_keep_the_same_figures() -> None:
    """Room is kept for the tools, so that line after line the same figures show."""
    short = call_line(USAGE, [TOOL], 112).plain
    longer = call_line(USAGE, [{**TOOL, "name": "shell_exec", "exit_code": 0}], 112).plain
    assert short.split("  · ")[0] == longer.split("  · ")[0]
