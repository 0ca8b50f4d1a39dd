"""A full disk under the state folder: one line saying what to free, no traceback, nothing lost,
and the same command resumes once there is room (a small tmpfs stands for the full disk)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest

from ouroboros.ground.errors import StateUnwritable
from ouroboros.ground.jsonl import JsonlWriter
from ouroboros.ground.messages import ToolCall
from ouroboros.model.scripted import Reply, ScriptedServer
from ouroboros.tools import ToolCaps, ToolRunner
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in
from tests.conftest import Project, fill


@pytest.mark.slow
def test_a_full_disk_stops_the_run_in_one_line_and_the_run_resumes(
    project: Project, small_disk: Path
) -> None:
    filler = fill(small_disk, leave=40_000)
    long = "a reply long enough to fill the journal quickly " * 40
    with ScriptedServer(lambda body: Reply(text=long)) as server:
        project.configure(server.url)
        full = project.run("run", "--max-turns", "200")
        assert full.returncode == 1
        lines = full.stderr.strip().splitlines()
        assert "Traceback" not in full.stderr
        assert lines[-1].startswith("error: no space left to write"), full.stderr
        assert "free at least" in lines[-1]
        done = sum(1 for line in (small_disk / "token_usage.jsonl").read_text().splitlines())
        assert 0 < done < 200
        # Starting again on the still-full disk says the same, in one line.
        again = project.run("run", "--max-turns", "200")
        assert again.returncode == 1
        assert "Traceback" not in again.stderr
        filler.unlink()
        resumed = project.run("run", "--max-turns", str(done + 5))
        assert resumed.returncode == 0, resumed.stderr
    # The run went on where it stopped: turns counted once, in order, five more.
    journal = [json.loads(line) for line in (small_disk / "journal.jsonl").read_text().splitlines()]
    turns = [r["usage"]["turn"] for r in journal if r["kind"] == "message" and "usage" in r]
    assert len(turns) == done + 5


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    disk = tmp_path / "workspace"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        (disk / "notes.md").write_text("precious notes\n")
        workspace = Workspace(disk, tmp_path / "SYSTEM_PROMPT.md")
        tools = ToolRunner(workspace, built_in(ShellExec(2), None, True), ToolCaps(2000))
        content = "x" * 200_000
        call = ToolCall(
            id="c",
            name="file_write",
            arguments=json.dumps({"path": "notes.md", "content": content}),
        )
        outcome = anyio.run(tools.run, call)
        tools.close()
        assert outcome.message.content.startswith("error: ")
        assert "\n" not in outcome.message.content.strip()
        assert (disk / "notes.md").read_text() == "precious notes\n"
        assert sorted(p.name for p in disk.iterdir()) == ["notes.md"]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_after_a_failed_write_no_line_joins_the_torn_one(
    project: Project, small_disk: Path
) -> None:
    path = small_disk / "journal.jsonl"
    writer = JsonlWriter(path, durable=True)
    writer.write('{"kind":"first"}')
    filler = fill(small_disk, leave=0)
    with pytest.raises(StateUnwritable):
        writer.write('{"kind":"second","pad":"' + "x" * 100_000 + '"}')
    filler.unlink()  # room again: a later line would land right after the torn bytes
    with pytest.raises(StateUnwritable):
        writer.write('{"kind":"third"}')
    writer.close()
    lines = path.read_bytes().split(b"\n")
    assert lines[0] == b'{"kind":"first"}'
    assert b"third" not in path.read_bytes()
