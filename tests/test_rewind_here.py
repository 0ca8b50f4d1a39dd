"""`rewind` in this process (the fast tier's; tests/test_checkpoints.py runs it as the command):
the workspace put back as session 1 found it, today's files moved aside, the refusal of a
session without a checkpoint one line."""

from __future__ import annotations

import pytest

from ouroboros.checkpoints.rewind import rewind
from ouroboros.ground.config_file import load_settings
from ouroboros.ground.errors import RunError
from ouroboros.model.scripted import Reply, tool
from tests.conftest import Project
from tests.inprocess import run_here


def write(path: str, content: str) -> Reply:
    return Reply(tool_calls=[tool("file_write", path=path, content=content)])


def test_a_rewind_puts_back_what_session_1_found_and_moves_today_aside(project: Project) -> None:
    (project.workspace / "kept.txt").write_text("before the run\n")
    ran = run_here(
        project,
        [write("kept.txt", "changed\n"), write("new.txt", "made\n")],
        session={"max_turns": 1},
        supervisor={"max_restarts": 1},
    )
    assert ran.returncode == 0, ran.stderr
    settings = load_settings(project.root / "config.toml")
    said = rewind(settings, 1)
    assert "session 1" in said
    assert (project.workspace / "kept.txt").read_text() == "before the run\n"
    assert not (project.workspace / "new.txt").exists()
    aside = [p for p in (project.state / "rewound").rglob("new.txt")]
    assert [p.read_text() for p in aside] == ["made\n"], "today's file was not moved aside"
    with pytest.raises(RunError, match=r"^session 9 has no checkpoint; sessions with one: 1-2$"):
        rewind(settings, 9)
