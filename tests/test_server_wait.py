"""A run with no server waits for it, and says so in a line that fits 120 columns: what it waits
for, that it tries for ever, and that Ctrl-C stops it; under `--quiet` too. `status` shows the
limits the command gave while it waits, and Ctrl-C ends the run cleanly."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from ouroboros.observe.describe import describe
from tests.conftest import Project


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lines_until(
    process: subprocess.Popen[str], found: Callable[[str], bool], cap_s: float = 60
) -> list[str]:
    """The process's stdout lines up to the first that `found` accepts (all of them if it ends
    first); `cap_s` only guards against a hang, nothing is timed."""
    assert process.stdout is not None
    seen: list[str] = []
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + cap_s
        while time.monotonic() < deadline and selector.select(deadline - time.monotonic()):
            line = process.stdout.readline()
            if not line:
                break
            seen.append(line.rstrip("\n"))
            if found(seen[-1]):
                break
    return seen


@pytest.mark.parametrize("quiet", [False, True])
@pytest.mark.slow
def test_a_run_with_no_server_says_it_waits_for_ever_and_how_to_stop_it(
    project: Project, quiet: bool
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    project.configure(url, llm={"retry_for_s": 0})
    args = ["run", "--max-turns", "3", *(["--quiet"] if quiet else [])]
    process = subprocess.Popen(
        [sys.executable, "-m", "ouroboros", *args],
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    try:
        seen = lines_until(process, lambda line: "waiting for" in line)
        status = project.run("status").stdout
        process.send_signal(signal.SIGINT)
        rest, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    waiting = seen[-1]
    assert f"waiting for {url}" in waiting, seen
    assert "trying for ever" in waiting
    assert "Ctrl-C stops" in waiting
    assert "`ollama serve`" in waiting
    assert all(len(line) <= 120 for line in [*seen, *rest.splitlines()]), [*seen, rest]
    # The limits the command gave, not config.toml's, though no call was made yet.
    assert " ".join(status.split()).count("turns limit 3 left of 3") == 1, status
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    (end,) = project.events("run_end")
    assert end["detail"] == "stop requested (SIGINT)"


def retry_line(**fields: object) -> dict[str, object]:
    said = {"attempt": 1, "wait_s": 1.0, "waited_s": 0, "retry_for_s": 0, "told": True}
    return {
        "ts": "2026-11-27T10:00:00.000+00:00",
        "kind": "retry",
        "server": "http://localhost:11434/v1",
        "message": "HTTP 503: server busy, please try again.  maximum pending requests exceeded "
        * 3,
        **said,
        **fields,
    }


def test_a_wait_is_told_in_lines_of_120_columns_and_later_in_a_short_one() -> None:
    first = describe(retry_line())
    assert first is not None
    assert len(first.plain) == 120
    assert "waiting for http://localhost:11434/v1 (HTTP 503: server busy" in first.plain
    assert first.plain.endswith("…): trying for ever, Ctrl-C stops")
    until = describe(retry_line(retry_for_s=300, unreachable=True))
    assert until is not None
    assert "(not running? Ollama: `ollama serve`): trying for 5 min, Ctrl-C stops" in until.plain
    later = describe(retry_line(attempt=40, waited_s=1830))
    assert later is not None
    assert later.plain.endswith("still waiting for http://localhost:11434/v1, try 40, 30 min")
    assert describe(retry_line(attempt=41, waited_s=1890, told=False)) is None
    assert describe(retry_line(attempt=41, told=False), tools=True) is not None


@pytest.mark.parametrize("width", [80, 100])
def test_a_narrow_terminal_cuts_the_cause_of_a_wait_never_how_to_stop_it(width: int) -> None:
    for fields in (
        {},
        {"unreachable": True},
        {"server": "http://gpu-box.example.internal:8080/v1"},
    ):
        line = describe(retry_line(**fields), width=width)
        assert line is not None
        assert line.cell_len <= width
        assert line.plain.endswith(": trying for ever, Ctrl-C stops"), line.plain
    later = describe(retry_line(attempt=40, waited_s=1830, retry_for_s=86400), width=width)
    assert later is not None
    assert later.cell_len <= width
    assert later.plain.endswith(", try 40, 30 min (gives up at 1440 min)"), later.plain
