"""`status`'s rows as a person reads them at 80 columns: the run's last meaningful event on one
line, a wait for the server said once, a row only where it has something to say."""

from __future__ import annotations

import io
import time
from pathlib import Path

from rich.console import Console

from ouroboros.ground.config import Settings
from ouroboros.ground.errors import RunError
from ouroboros.ground.figures import RunLimits
from ouroboros.ground.state_folder import JOURNAL
from ouroboros.model.llm import Unreachable
from ouroboros.model.retry import Retry, journalled
from ouroboros.observe.describe import retry_text
from ouroboros.observe.status import read_status, render_status
from ouroboros.run.lock import state_lock
from ouroboros.server.records import ServerExited, ServerStarted
from ouroboros.state.journal import Journal
from ouroboros.state.records import EndReason, RunEnd, RunStart, Starting

TIMINGS = "\n".join(
    f"prompt eval time = {n}.00 ms / 12 tokens (0.{n} ms per token, 100.0 tokens per second)"
    for n in range(8)
)
"""The last lines of a llama-server's log when the run stops it: its timings."""


LIMITS = RunLimits(max_total_turns=5, wind_down_turns=2)


def started(state: Path) -> Journal:
    """A journal whose run recorded its limits, as every run does before it asks the server."""
    journal = Journal(state / JOURNAL)
    journal.append(Starting(limits=LIMITS))
    return journal


def shown(state: Path, width: int = 80) -> list[str]:
    def no_settings() -> Settings:
        raise RunError("the test's runs record their limits")

    out = io.StringIO()
    panel = render_status(read_status(state, time.time()), no_settings)
    Console(file=out, width=width).print(panel)
    return out.getvalue().splitlines()


def row(lines: list[str], name: str) -> list[str]:
    """A row's lines: its own, and those that go on under it (no name of their own)."""
    found: list[str] = []
    for line in lines:
        label = line.strip("│ ").split("  ")[0]
        if label == name:
            found.append(line)
        elif found and line.startswith("│" + " " * 17) and line.strip("│ "):
            found.append(line)
        elif found:
            break
    return found


def test_after_a_clean_end_the_last_event_is_the_end_on_one_line(tmp_path: Path) -> None:
    """The run stops its managed server after its end: that stop (with eight lines of the
    server's timings) is putting things away, not the run's last event."""
    journal = started(tmp_path)
    journal.append(ServerStarted(pid=12, log="server.log"))
    journal.append(RunStart(model="gemma", base_url="http://x/v1", limits=LIMITS))
    journal.append(RunEnd(reason=EndReason.MAX_TOTAL_TURNS, detail="5 calls"))
    journal.append(ServerExited(pid=12, code=0, signal=None, up_s=30.0, tail=TIMINGS))
    journal.close()
    last = row(shown(tmp_path), "last event")
    assert len(last) == 1, last
    assert "run stopped: max_total_turns (5 calls)" in last[0]
    assert "prompt eval time" not in last[0]


def test_a_long_last_event_is_one_line_cut_with_an_ellipsis(tmp_path: Path) -> None:
    """The server died mid-run: its exit is the last event, with its log's last lines, shown
    on one line."""
    journal = started(tmp_path)
    journal.append(RunStart(model="gemma", base_url="http://x/v1", limits=LIMITS))
    journal.append(ServerExited(pid=12, code=1, signal=None, up_s=30.0, tail=TIMINGS))
    journal.close()
    last = row(shown(tmp_path), "last event")
    assert len(last) == 1, last
    assert "model server (pid 12) stopped: exit status 1" in last[0]
    assert "…" in last[0]


def test_a_wait_for_a_server_nothing_answers_at_says_so_once(tmp_path: Path) -> None:
    """The error discovery journals wraps the client's ("cannot reach a model server at … (cannot
    reach the model server: Connection error.)"): `status` says where nothing answers, and what
    to start, once; the last event counts the seconds waited (it said "0 min")."""
    journal = started(tmp_path)
    server = "http://127.0.0.1:9/v1"
    error = Unreachable(
        f"cannot reach a model server at {server} (cannot reach the model server: Connection "
        "error.): start it (for Ollama: `ollama serve`) or set llm.base_url"
    )
    journalled(journal)(Retry(1, 0.5, 0.0, error, server, 600))
    journalled(journal)(Retry(2, 1.0, 12.0, error, server, 600))
    journal.close()
    with state_lock(tmp_path):  # the run, alive and waiting
        lines = shown(tmp_path, width=200)
    said = " ".join(" ".join(row(lines, "run")).replace("│", " ").split())
    assert f"nothing answers at {server} (not running? Ollama: `ollama serve`)" in said
    assert "cannot reach" not in said
    last = " ".join(row(lines, "last event"))
    assert f"still waiting for {server}, try 2, 12 s (gives up at 10 min)" in last


def test_waits_of_a_minute_or_more_are_said_in_minutes() -> None:
    line = {"server": "http://x/v1", "attempt": 40, "waited_s": 1830, "retry_for_s": 0}
    assert retry_text(line)[0] == "still waiting for http://x/v1, try 40, 30 min"


def test_the_tool_calls_row_is_there_only_with_something_to_say(tmp_path: Path) -> None:
    """A run whose calls all travel natively has nothing to say of the text protocol: the row
    said "none read from text" in every box, and no doc said what it was."""
    journal = started(tmp_path)
    journal.append(RunStart(model="gemma", base_url="http://x/v1", limits=LIMITS))
    journal.close()
    assert not row(shown(tmp_path), "tool calls")
