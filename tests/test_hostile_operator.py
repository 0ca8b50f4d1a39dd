"""What is left for a run to take from the operator, read as hostile (issue 29): a FIFO, a link
to /dev/zero, a folder, a huge file or garbage where `tell` leaves a message or `pause` and
`unpause` a request, and what `tell` itself is given (a non-UTF-8 argument, a `--file` that is
not a regular file). Through the real CLI (a hang is a timeout, never a stuck test) against the
scripted loopback server: a one-line warning or error, the thing renamed `.rejected` (nothing
lost), never a hang, a traceback or a run that cannot start."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ouroboros.ground.state_folder import INBOX, PAUSE_REQUEST, TASKS, UNPAUSE_REQUEST
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.operator import inbox
from tests.conftest import Project

pytestmark = pytest.mark.slow  # every test here runs `python -m ouroboros`

TOLD = "the tests live in tests/"
CLOSED = "http://127.0.0.1:9/v1"
HUGE = 8 << 30
"""A sparse file's size: read whole, it would fill the memory."""


def agent(body: dict[str, Any]) -> Reply:
    step = sum(1 for m in body["messages"] if m["role"] == "assistant") + 1
    return Reply(tool_calls=[tool("shell_exec", command=f"echo step {step}")])


def fifo(path: Path) -> None:
    os.mkfifo(path)


def zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def folder(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("kept")


def huge(path: Path) -> None:
    with path.open("wb") as f:
        f.truncate(HUGE)


def garbage(path: Path) -> None:
    path.write_bytes(b"\xff{not json")


def surrogate(path: Path) -> None:
    path.write_text(json.dumps({"sent_at": "now", "text": "half a character: \udcff"}))


def long_sent_at(path: Path) -> None:
    """Shown to the agent with the text: a page of it would fill a small window."""
    path.write_text(json.dumps({"sent_at": "x" * 100_000, "text": "hi"}))


def nested(path: Path) -> None:
    """Past the depth the JSON parser reads at: a RecursionError, not a ValueError."""
    path.write_text("[" * 100_000)


PLANTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "FIFO": (fifo, "a FIFO"),
    "link to /dev/zero": (zero, "a link"),
    "folder": (folder, "a folder"),
    "8 GiB file": (huge, f"over {inbox.MAX_FILE_BYTES:,} bytes"),
    "garbage": (garbage, "not a message `tell` wrote"),
    "lone surrogate": (surrogate, "not a message `tell` wrote"),
    "100 KB sent_at": (long_sent_at, "not a message `tell` wrote"),
    "nested deep": (nested, "not a message `tell` wrote"),
}


def warnings(output: str, word: str) -> list[str]:
    return [line for line in output.splitlines() if "warning" in line and word in line]


@pytest.mark.parametrize("plant", list(PLANTS))
def test_what_is_no_message_in_the_inbox_is_set_aside_and_the_run_goes_on(
    project: Project, plant: str
) -> None:
    """Planted before a message `tell` left: the message is delivered, the plant renamed."""
    make, said = PLANTS[plant]
    (project.state / INBOX).mkdir(parents=True)
    planted = project.state / INBOX / "00000000000000000001-bad.json"
    make(planted)
    inbox.post(project.state, TOLD)
    with ScriptedServer(agent) as server:
        project.configure(server.url)
        ran = project.run("run", "--max-turns", "2", timeout=60)
        requests = server.chat_requests()
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr + ran.stdout
    assert TOLD in str(requests[0]["messages"][-1]["content"])
    [warned] = warnings(ran.stdout, planted.name)
    assert said in warned, warned
    assert "renamed 00000000000000000001-bad.json.rejected" in warned
    assert not os.path.lexists(planted)
    assert os.path.lexists(planted.with_name(planted.name + ".rejected"))
    assert inbox.waiting(project.state) == []


@pytest.mark.parametrize("plant", ["FIFO", "link to /dev/zero", "folder"])
@pytest.mark.parametrize("request_name", [PAUSE_REQUEST, UNPAUSE_REQUEST])
def test_a_request_that_is_no_regular_file_is_set_aside_and_asks_nothing(
    project: Project, plant: str, request_name: str
) -> None:
    make, _ = PLANTS[plant]
    project.state.mkdir()
    make(project.state / request_name)
    with ScriptedServer(agent) as server:
        project.configure(server.url)
        ran = project.run("run", "--max-turns", "2", timeout=60)
        assert len(server.chat_requests()) == 2  # not paused
    assert ran.returncode == 0, ran.stderr
    [warned] = warnings(ran.stdout, request_name)
    assert f"renamed {request_name}.rejected" in warned
    assert not os.path.lexists(project.state / request_name)
    assert os.path.lexists(project.state / f"{request_name}.rejected")


@pytest.mark.parametrize(
    ("plant", "said"),
    [
        ("FIFO", "it is a FIFO"),
        ("link to /dev/zero", "it is a device"),
        ("folder", "it is a folder"),
        ("8 GiB file", f"it is over {inbox.MAX_MESSAGE_BYTES:,} bytes"),
        ("garbage", "not UTF-8 text"),
    ],
)
def test_tell_file_reads_only_a_regular_file_up_to_the_cap(
    project: Project, plant: str, said: str
) -> None:
    PLANTS[plant][0](project.root / "note.txt")
    project.configure(CLOSED)
    ran = project.run("tell", "--file", "note.txt", timeout=30)
    assert ran.returncode == 1
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert f"cannot read note.txt: {said}" in ran.stderr
    assert inbox.waiting(project.state) == []


def test_tell_with_a_non_utf8_argument_is_one_line_and_exit_2(project: Project) -> None:
    project.configure(CLOSED)
    ran = project.run("tell", os.fsdecode(b"use \xff pytest"))
    assert ran.returncode == 2
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert "not UTF-8 text" in ran.stderr
    assert inbox.waiting(project.state) == []


def test_an_inbox_that_is_a_link_is_not_read_through(project: Project) -> None:
    """A link planted for the inbox itself: what is where it points is neither delivered nor
    renamed."""
    elsewhere = project.root / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "00000000000000000001-a.json").write_text("not a message")
    (elsewhere / "00000000000000000002-b.json").write_text(
        json.dumps({"sent_at": "now", "text": TOLD})
    )
    project.state.mkdir(parents=True)
    (project.state / INBOX).symlink_to(elsewhere)
    with ScriptedServer(agent) as server:
        project.configure(server.url)
        ran = project.run("run", "--max-turns", "2", timeout=60)
        requests = server.chat_requests()
    assert ran.returncode == 0, ran.stderr
    assert TOLD not in json.dumps(requests)
    assert sorted(os.listdir(elsewhere)) == [
        "00000000000000000001-a.json",
        "00000000000000000002-b.json",
    ]
    told = project.run("tell", "hello")
    assert told.returncode == 1
    assert "inbox is a link, which the run does not read through" in told.stderr
    assert len(told.stderr.strip().splitlines()) == 1, told.stderr
    assert len(os.listdir(elsewhere)) == 2, "a message was left where the run never looks"


@pytest.mark.parametrize("request_name", [PAUSE_REQUEST, UNPAUSE_REQUEST])
def test_pause_and_unpause_write_no_file_through_a_link_planted_at_their_request(
    project: Project, request_name: str
) -> None:
    """A dangling link at the request's name: the command refuses in one line and creates
    nothing where the link points."""
    project.configure("http://127.0.0.1:9/v1")
    project.state.mkdir(parents=True, exist_ok=True)
    target = project.root / "made-through-the-link"
    (project.state / request_name).symlink_to(target)
    result = project.run(request_name)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not target.exists()


@pytest.mark.parametrize("folder", [INBOX, TASKS])
def test_a_folder_swapped_for_a_link_after_it_was_listed_is_not_read_removed_or_renamed_through(
    tmp_path: Path, folder: str
) -> None:
    """Between listing the inbox (or the tasks) and reading, removing or setting aside what it
    listed, the folder is swapped for a link: the files where the link points are not the run's."""
    state = tmp_path / "state"
    name = f"20260101-abcd{inbox.SUFFIX}"
    (state / folder).mkdir(parents=True)
    (state / folder / name).write_text('{"text": "from the run", "sent_at": "now"}')
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / name).write_text('{"text": "from elsewhere", "sent_at": "now"}')
    (state / folder).rename(tmp_path / "moved")
    (state / folder).symlink_to(outside)
    with pytest.raises(inbox.NotAMessage):
        inbox.read_in(state / folder, name, inbox.MAX_FILE_BYTES)
    inbox.remove_in(state / folder, name)
    assert inbox.set_aside_in(state / folder, name) is None
    assert sorted(os.listdir(outside)) == [name], "nothing where the link points was touched"
