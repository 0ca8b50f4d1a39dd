"""The harness's own file work against an agent that plants links, FIFOs and races (issue 20,
rows 1-5 and 13): run through the real `ToolRunner`, with Landlock and without it, and with the
kernel's openat2 and with the name-by-name walk `safefs` falls back to.

The harness is confined by nobody, so none of these promises depends on Landlock: each case
holds the same with confinement off. Every case ends with the journal and the files outside the
workspace as they were.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from ouroboros.context.truncate import saved_name
from ouroboros.ground.messages import ToolCall
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.tools import ToolCaps, ToolOutcome, ToolRunner, safefs
from ouroboros.tools.processes import Processes
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in
from tests.conftest import Project, wait_for
from tests.test_hostile import Place, place, refused_in_one_line, shell, untouched

__all__ = ["place"]  # the fixture, shared with tests/test_hostile.py
JOURNAL = '{"kind": "run_start"}\n'
HANG_S = 20
"""A hang is minutes: a call not back by then failed (and is given up, not waited for)."""


@pytest.fixture(params=["openat2", "walk"])
def opener(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "openat2" and not safefs.kernel_resolves():
        pytest.skip("this kernel has no openat2 (Linux 5.6+)")
    safefs.USE_OPENAT2 = request.param == "openat2"
    yield request.param
    safefs.USE_OPENAT2 = None


def call(
    place: Place | ToolRunner, name: str, seen: frozenset[str] = frozenset(), **arguments: object
) -> ToolOutcome:
    """One call, failed rather than waited for if it hangs. `seen`: `ToolContext.seen`."""
    runner = place if isinstance(place, ToolRunner) else place.runner
    tool_call = ToolCall(id="c1", name=name, arguments=json.dumps(arguments))

    async def bounded() -> ToolOutcome:
        with anyio.fail_after(HANG_S):
            return await runner.run(tool_call, seen=seen)

    return anyio.run(bounded)


def link(place: Place, name: str, target: Path | str) -> None:
    """What `ln -s` in a command does (planted directly: the block list refuses a command that
    names the state folder, an attacker spells it otherwise)."""
    (place.workspace / name).symlink_to(target)


def outside_as_it_was(place: Place) -> bool:
    return untouched(place) and sorted(os.listdir(place.outside)) == ["sentinel"]


def test_link_at_the_old_temporary_name(place: Place, opener: str) -> None:
    """Row 1: the temporary name was `.<name>.ouroboros-tmp`; a link there redirected the write."""
    link(place, ".notes.md.ouroboros-tmp", place.outside / "sentinel")
    outcome = call(place, "file_write", path="notes.md", content="notes")
    assert outcome.error is None
    assert (place.workspace / "notes.md").read_text() == "notes"
    assert outside_as_it_was(place)


def test_link_to_the_journal_at_the_temporary_name(place: Place, opener: str) -> None:
    """Row 2: the journal survives byte for byte."""
    link(place, ".j.ouroboros-tmp", place.state / "journal.jsonl")
    assert call(place, "file_write", path="j", content="").error is None
    assert (place.state / "journal.jsonl").read_text() == JOURNAL


def test_link_to_the_journal_at_the_name_written(place: Place, opener: str) -> None:
    link(place, "j", place.state / "journal.jsonl")
    outcome = call(place, "file_write", path="j", content="")
    assert refused_in_one_line(outcome)
    assert "j is a symbolic link to" in outcome.message.content
    assert (place.state / "journal.jsonl").read_text() == JOURNAL


def test_link_inside_pointing_inside_is_refused_with_its_target(place: Place, opener: str) -> None:
    (place.workspace / "notes").mkdir()
    (place.workspace / "notes" / "a.md").write_text("kept\n")
    link(place, "a", "notes/a.md")
    link(place, "n", "notes")
    for name, path in (("file_read", "a"), ("file_write", "a"), ("file_read", "n/a.md")):
        outcome = call(place, name, path=path, content="x")
        assert refused_in_one_line(outcome), (name, path)
        assert "name its target notes" in outcome.message.content
    assert (place.workspace / "notes" / "a.md").read_text() == "kept\n"


def test_links_inside_links(place: Place, opener: str) -> None:
    (place.workspace / "real").mkdir()
    link(place, "up", place.root)
    link(place, "l2", "up")
    link(place, "real/l", "../l2")
    for path in ("l2/outside/sentinel", "real/l/outside/new", "real/l/.ouroboros/journal.jsonl"):
        assert refused_in_one_line(call(place, "file_read", path=path)), path
        assert refused_in_one_line(call(place, "file_write", path=path, content="x")), path
    assert refused_in_one_line(call(place, "list_dir", path="real/l"))
    assert outside_as_it_was(place)


def test_list_dir_shows_links_and_never_follows_them(place: Place, opener: str) -> None:
    link(place, "st", place.state)
    listing = call(place, "list_dir", path=".").message.content
    assert f"st -> {place.state}" in listing
    assert "journal" not in listing
    assert refused_in_one_line(call(place, "list_dir", path="st"))


def test_outputs_folder_replaced_by_a_link_out(place: Place, opener: str) -> None:
    """Row 3: a whole output over the cap is not saved through the link; the result still
    comes back (the journal keeps it at the cap)."""
    link(place, ".outputs", place.outside)
    outcome = shell(place, "seq 1 20000")
    assert outcome.message.content.startswith("exit code 0\n1\n")
    assert outside_as_it_was(place)


def test_dangling_link_at_the_exact_spill_name(place: Place, opener: str) -> None:
    text = "exit code 0\n" + "".join(f"{i}\n" for i in range(1, 20001))
    spill = saved_name("shell_exec", text)
    (place.workspace / ".outputs").mkdir()
    link(place, spill, place.outside / "spilled")
    outcome = shell(place, "seq 1 20000")
    assert outcome.message.saved_to == spill  # the name predicted is the name used
    assert outside_as_it_was(place)


def background_log(outcome: ToolOutcome) -> Path | None:
    note = outcome.message.content.rpartition("their further output goes to ")[2]
    return Path(note.removesuffix("]")) if note != outcome.message.content else None


@pytest.mark.parametrize(
    "plant",
    ["ln -s {outside}/bg.txt {log}", "touch {log}", "mkfifo {log}"],
    ids=["link", "file", "FIFO"],
)
def test_background_log_name_taken(place: Place, opener: str, plant: str) -> None:
    """Row 4: the log is named by bash's pid, which the command knows (`$$`): whatever it put
    at that name is never opened; the log goes to a new name, which the result gives."""
    setup = plant.format(outside=place.outside, log=".outputs/background-$$.log")
    outcome = shell(place, f"mkdir -p .outputs; {setup}; (sleep 0.5; echo X) &")
    log = background_log(outcome)
    assert log is not None, outcome.message.content
    assert log.name.count("-") == 2, "a new name was chosen"
    wait_for(lambda: (place.workspace / log).read_text() == "X\n", timeout=10)
    assert (place.workspace / log).read_text() == "X\n"
    assert outside_as_it_was(place)


def test_background_log_in_outputs_linked_out(place: Place, opener: str) -> None:
    link(place, ".outputs", place.outside)
    outcome = shell(place, "(sleep 0.5; echo X) &")
    assert "their further output is dropped" in outcome.message.content
    assert "symbolic link" in outcome.message.content
    place.runner.end_session()
    assert outside_as_it_was(place)


@pytest.mark.slow
def test_folder_swapped_for_a_link_while_reading(place: Place, opener: str) -> None:
    """Row 5: a folder `d` swapped with a link to the state folder as fast as the machine goes
    while `file_read d/journal.jsonl` runs 300 times: the state is never read."""
    decoy = place.workspace / "d"
    decoy.mkdir()
    (decoy / "journal.jsonl").write_text("decoy\n")
    (place.workspace / "d-link").symlink_to(place.state)
    stop = threading.Event()

    def swap() -> None:
        ws = place.workspace
        while not stop.is_set():
            os.rename(ws / "d", ws / "d-dir")
            os.rename(ws / "d-link", ws / "d")
            os.rename(ws / "d", ws / "d-link")
            os.rename(ws / "d-dir", ws / "d")

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        results = [call(place, "file_read", path="d/journal.jsonl") for _ in range(300)]
    finally:
        stop.set()
        swapper.join()
    texts = [r.message.content for r in results]
    assert not [t for t in texts if "run_start" in t]
    assert "decoy" in texts  # the race ran: some reads found the folder


def test_fifo_at_the_old_temporary_name(place: Place, opener: str) -> None:
    """Row 13: `file_write n` opened `.n.ouroboros-tmp` for writing, and waited on the FIFO."""
    shell(place, "mkfifo .n.ouroboros-tmp")
    outcome = call(place, "file_write", path="n", content="x")
    assert outcome.error is None
    assert (place.workspace / "n").read_text() == "x"
    assert stat.S_ISFIFO((place.workspace / ".n.ouroboros-tmp").lstat().st_mode)


def special(place: Place, kind: str) -> Path:
    path = place.workspace / kind
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
    elif os.geteuid() == 0:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    else:
        pytest.skip("making a device node needs root")
    return path


@pytest.mark.parametrize("kind", ["FIFO", "socket", "device"])
def test_special_files_are_neither_read_nor_written(place: Place, opener: str, kind: str) -> None:
    path = special(place, kind)
    before = path.lstat()
    assert refused_in_one_line(call(place, "file_read", path=kind))
    outcome = call(place, "file_write", path=kind, content="x")
    assert refused_in_one_line(outcome)
    assert kind.lower() in outcome.message.content.lower()
    assert (path.lstat().st_mode, path.lstat().st_ino) == (before.st_mode, before.st_ino)


def test_offset_deep_into_a_huge_sparse_file(place: Place, opener: str) -> None:
    """Row 13: lines are found by reading; 8 TB of holes read for hours. The read stops after
    `SKIP_MAX_BYTES` and says how to read that deep instead."""
    with open(place.workspace / "sparse", "wb") as f:
        f.truncate(8 << 40)
    outcome = call(place, "file_read", path="sparse", offset=2_000_000_000_000)
    assert refused_in_one_line(outcome)
    assert "sed -n '2000000000000," in outcome.message.content


def test_offset_past_the_end(place: Place, opener: str) -> None:
    (place.workspace / "small").write_text("a\nb\n")
    for offset, expected in ((3, "has 2 lines; offset 3 is past its end"), (10**12, "no line")):
        outcome = call(place, "file_read", path="small", offset=offset)
        assert refused_in_one_line(outcome)
        assert expected in outcome.message.content


def test_hard_link_to_a_file_outside(place: Place, opener: str) -> None:
    """A hard link is a regular file of the workspace: reading it is what the kernel lets the
    agent's own commands do. Writing replaces the name (a rename): the outside file's inode
    is never written."""
    os.link(place.outside / "sentinel", place.workspace / "hard")
    assert call(place, "file_read", path="hard").message.content == "untouched"
    read = frozenset({"hard"})
    assert call(place, "file_write", seen=read, path="hard", content="changed").error is None
    assert (place.workspace / "hard").read_text() == "changed"
    assert outside_as_it_was(place)


@pytest.mark.parametrize(
    "path",
    ["../outside/new", "a/../../outside/new", "{root}/outside/new", "/proc/self/root{root}/x"],
)
def test_paths_leaving_the_workspace(place: Place, opener: str, path: str) -> None:
    filled = path.format(root=place.root)
    assert refused_in_one_line(call(place, "file_write", path=filled, content="x"))
    assert refused_in_one_line(call(place, "file_read", path=filled))
    assert outside_as_it_was(place)


def test_dotdot_after_a_link_stays_by_the_words(place: Place, opener: str) -> None:
    """`lo/../x` means `x` (resolved by its words, never through the link `lo`)."""
    link(place, "lo", place.outside)
    assert call(place, "file_write", path="lo/../x", content="in").error is None
    assert call(place, "file_write", path=f"{place.workspace}/y", content="in").error is None
    assert (place.workspace / "x").read_text() == (place.workspace / "y").read_text() == "in"
    assert outside_as_it_was(place)


@pytest.mark.parametrize(
    "path", ["n" * 300, "/".join(["d" * 200] * 30), "/".join(["e" * 100] * 45)]
)
def test_very_long_paths(place: Place, opener: str, path: str) -> None:
    for name in ("file_read", "file_write", "list_dir"):
        outcome = call(place, name, path=path, content="x")
        assert refused_in_one_line(outcome), name
        assert len(outcome.message.content) < 1000


def test_link_at_the_system_prompt_name(place: Place, opener: str) -> None:
    """The system prompt is reachable outside the workspace: its name is opened in its folder
    without following a link, also when the link was there when the run started."""
    prompt = place.root / "SYSTEM_PROMPT.md"
    prompt.unlink()
    prompt.symlink_to(place.outside / "sentinel")
    workspace = Workspace(place.workspace, prompt)  # the next run's
    runner = ToolRunner(workspace, built_in(ShellExec(3.0), None, True), ToolCaps(4000))
    try:
        assert refused_in_one_line(
            call(runner, "file_write", path="../SYSTEM_PROMPT.md", content="x")
        )
        assert refused_in_one_line(call(runner, "file_read", path=str(prompt)))
        outcome = call(runner, "file_write", path=str(place.outside / "sentinel"), content="x")
        assert refused_in_one_line(outcome)  # the link's target is not the system prompt
    finally:
        runner.close()
    assert outside_as_it_was(place)


STUCK = """
import os, anyio
from ouroboros.tools.abandonable import abandonable

async def main() -> None:
    with anyio.move_on_after(0.3):
        await abandonable(os.open, {fifo!r}, os.O_RDONLY)  # no writer ever comes

anyio.run(main)
print("stopped")
"""


def test_a_tool_stuck_in_a_system_call_never_keeps_the_run(tmp_path: Path) -> None:
    """A cancelled call (SIGINT/SIGTERM cancel the run's scope) is given up, and the process
    then exits: the stuck thread is a daemon, not joined at exit."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    script = STUCK.format(fifo=str(fifo))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=HANG_S)
    assert done.stdout == b"stopped\n"


@pytest.mark.slow
def test_planted_links_through_a_real_run(project: Project) -> None:
    """Rows 1-3 end to end: links planted in the workspace before `run` (as an earlier session's
    commands would) at the temporary name, at the name written, and as `.outputs`; the run
    writes, reads and spills through them, and a second `run` resumes the same journal."""
    outside = project.root / "outside"
    outside.mkdir()
    (outside / "sentinel").write_text("untouched\n")
    project.workspace.mkdir(exist_ok=True)
    journal = project.state / "journal.jsonl"
    (project.workspace / ".j.ouroboros-tmp").symlink_to(journal)
    (project.workspace / "j2").symlink_to(journal)
    (project.workspace / "s").symlink_to(outside / "sentinel")
    (project.workspace / ".outputs").symlink_to(outside)
    script = [
        Reply(
            tool_calls=[
                tool("file_write", path="j", content=""),
                tool("file_write", path="j2", content=""),
                tool("file_write", path="s", content="x"),
                tool("file_read", path="j2"),
                tool("shell_exec", command="seq 1 20000"),
            ]
        ),
        Reply(text="done"),
        Reply(text="again"),
    ]
    with ScriptedServer(script) as server:
        project.configure(server.url)
        first = project.run("run", "--max-turns", "2")
        before = journal.read_bytes()
        second = project.run("run", "--max-turns", "1")
        shown = [m["content"] for r in server.chat_requests() for m in r["messages"]]
    assert first.returncode == 0, first.stderr
    assert not [text for text in shown if "run_start" in text]  # the journal was never read
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("fresh") == 0
    assert journal.read_bytes().startswith(before)  # resumed: the first run's records kept
    kinds = [json.loads(line)["kind"] for line in before.splitlines()]
    assert next(k for k in kinds if k != "notice") == "starting"  # then run_start
    assert sorted(os.listdir(outside)) == ["sentinel"]
    assert (outside / "sentinel").read_text() == "untouched\n"


def test_the_workspace_named_through_a_link_of_the_users_is_reached(tmp_path: Path) -> None:
    """A home folder that is a link (`/home` -> `/data/home`): the agent may name its files
    by either path. A link of the agent's below the workspace is still never followed."""
    real = tmp_path / "real" / "project" / "workspace"
    real.mkdir(parents=True)
    (real / "notes.md").write_text("mine\n")
    (tmp_path / "home").symlink_to(tmp_path / "real")
    (real / "loop").symlink_to(real)
    ws = Workspace(tmp_path / "home" / "project" / "workspace", tmp_path / "SYSTEM_PROMPT.md")
    shell = ShellExec(5, Processes(None, use_cgroup=False))
    runner = ToolRunner(ws, built_in(shell, None, True), ToolCaps(4000))
    try:
        through = str(tmp_path / "home" / "project" / "workspace" / "notes.md")
        read = anyio.run(
            runner.run, ToolCall(id="r", name="file_read", arguments=json.dumps({"path": through}))
        )
        assert read.message.content == "mine"
        looped = str(tmp_path / "home" / "project" / "workspace" / "loop" / "notes.md")
        refused = anyio.run(
            runner.run, ToolCall(id="l", name="file_read", arguments=json.dumps({"path": looped}))
        )
        assert refused.message.error
        assert "link" in refused.message.content
    finally:
        runner.close()
