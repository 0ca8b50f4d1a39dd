"""Workspace checkpoints: a copy of the workspace at each session start, and `rewind --session N`
putting the workspace back exactly, moving today's files aside (never deleting one), the next
session told."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from ouroboros.ground.state_folder import REWOUND
from ouroboros.model.scripted import Reply, tool
from tests.conftest import Project
from tests.inprocess import run_here

pytestmark = pytest.mark.slow  # every test here runs `python -m ouroboros`

Tree = dict[str, tuple[str, bytes]]


def tree(root: Path) -> Tree:
    """Every file and link beneath `root` (but the harness's `.outputs/`): its kind, with the
    executable bit, and its bytes or target; folders by their files."""
    found: Tree = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (folder == str(root) and d == ".outputs")]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            key = os.path.relpath(path, root)
            if stat.S_ISLNK(info.st_mode):
                found[key] = ("link", os.fsencode(os.readlink(path)))
            else:
                kind = "exec" if info.st_mode & stat.S_IXUSR else "file"
                found[key] = (kind, Path(path).read_bytes())
    return found


def sessions_script(steps: list[list[Reply]], seen: dict[int, Tree], workspace: Path) -> Any:
    """Replies session by session; the workspace as each session found it at its first call."""
    queue = [reply for session in steps for reply in session]

    def reply(body: dict[str, Any]) -> Reply:
        opening = str(body["messages"][1]["content"])
        number = 1 if opening.startswith("Session 1 ") else int(opening.split()[1].rstrip("."))
        seen.setdefault(number, tree(workspace))
        return queue.pop(0) if queue else Reply(text="done")

    return reply


def shell(command: str) -> Reply:
    return Reply(tool_calls=[tool("shell_exec", command=command)])


def write(path: str, content: str) -> Reply:
    return Reply(tool_calls=[tool("file_write", path=path, content=content)])


def test_rewind_restores_created_changed_and_deleted_files_exactly(project: Project) -> None:
    ws = project.workspace
    steps = [
        [
            write("a.txt", "A one\n"),
            shell(
                "mkdir -p d && printf 'C one\\r\\nno end' > d/c.txt && echo B > b.txt && "
                "ln -s d/c.txt link && printf '#!/bin/sh\\n' > run.sh && chmod +x run.sh && "
                "printf 'x' > \"$(printf 'new\\nline')\""
            ),
        ],
        [write("a.txt", "A two\n"), shell("rm b.txt link && mkdir e && echo E > e/new.txt")],
        [shell("echo C3 > d/c.txt && chmod -x run.sh"), write("f.txt", "F")],
    ]
    seen: dict[int, Tree] = {}
    ran = run_here(
        project,
        sessions_script(steps, seen, ws),
        session={"max_turns": 2},
        supervisor={"max_restarts": 2},
    )
    assert ran.returncode == 0, ran.stderr
    assert sorted(seen) == [1, 2, 3]
    today = tree(ws)
    assert today != seen[2]

    rewound = project.run("rewind", "--session", "2")
    assert rewound.returncode == 0, rewound.stderr
    assert tree(ws) == seen[2]
    asides = list((project.state / REWOUND).iterdir())
    assert len(asides) == 1
    assert str(asides[0]) in rewound.stdout
    # Today's files that the rewind replaced or removed, as they were: nothing deleted.
    assert tree(asides[0]) == {
        path: today[path] for path in ("a.txt", "d/c.txt", "run.sh", "e/new.txt", "f.txt")
    }
    [record] = [r for r in project.records("journal.jsonl") if r["kind"] == "rewound"]
    assert (record["session"], record["moved"], record["after_session"]) == (2, 5, 3)
    assert [e["session"] for e in project.events("checkpoint")] == [1, 2, 3]
    assert project.events("rewound")[0]["moved_aside"] == str(asides[0])
    tail = project.run("tail").stdout
    assert "checkpoint of the workspace at session 2: 6 files, 39 bytes" in tail
    assert "workspace rewound to the start of session 2: 5 file(s) restored, 5 moved" in tail
    status = project.run("status").stdout
    assert "checkpoints  3 (`rewind --session N` puts one back)" in status
    assert "session 2, " in status
    assert "rewound to session 2" in status
    assert project.run("report").returncode == 0
    report = (project.state / "report.html").read_text()
    assert '<table id="checkpoints">' in report
    assert "checkpoint of the workspace at session 3" in report

    # The next session opens with a note saying so, and carries nothing of the last step.
    again = run_here(
        project, [Reply(text="looking")], session={"max_turns": 1}, supervisor={"max_restarts": 3}
    )
    first = again.chat_requests()[0]["messages"]
    assert "rewound to the start of session 2 by the operator" in first[1]["content"]
    assert str(asides[0]) in first[1]["content"]
    assert len(first) == 2
    later = run_here(
        project, [Reply(text="on")], session={"max_turns": 1}, supervisor={"max_restarts": 4}
    )
    assert "rewound" not in str(later.chat_requests()[0]["messages"][1]["content"])


def test_rewind_refuses_a_session_without_a_checkpoint(project: Project) -> None:
    ran = run_here(
        project,
        [write("a.txt", "A"), write("b.txt", "B")],
        session={"max_turns": 1},
        supervisor={"max_restarts": 1},
    )
    assert ran.returncode == 0, ran.stderr
    before = tree(project.workspace)
    refused = project.run("rewind", "--session", "5")
    assert refused.returncode == 1
    assert refused.stderr.strip() == "error: session 5 has no checkpoint; sessions with one: 1-2"
    assert tree(project.workspace) == before
    assert not (project.state / REWOUND).exists()


def test_a_session_left_open_ends_with_the_rewind(project: Project) -> None:
    """A run stopped by a run limit leaves its session open: the rewind ends it, so the next
    run starts a session that is told, rather than going on with what it saw before."""
    script = [write("a.txt", "A"), write("b.txt", "B"), write("c.txt", "C")]
    limits = {"max_total_turns": 3}
    ran = run_here(project, script, session={"max_turns": 2}, supervisor=limits)
    assert ran.returncode == 0, ran.stderr
    assert project.run("rewind", "--session", "1").returncode == 0
    assert tree(project.workspace) == {}
    # One record, journalled before the workspace changes, ends the session and begins the rewind.
    began = [r for r in project.records("journal.jsonl") if r["kind"] == "rewinding"]
    assert (began[0]["after_session"], began[0]["ended_turns"]) == (2, 1)
    ends = project.events("session_end")
    assert (ends[-1]["session"], ends[-1]["reason"], ends[-1]["turns"]) == (2, "rewound", 1)
    again = run_here(project, [Reply(text="looking")], supervisor={"max_total_turns": 4})
    opening = str(again.chat_requests()[0]["messages"][1]["content"])
    assert opening.startswith("Session 3. The previous session ran 1 turns and ended because the")
    assert "operator rewound the workspace" in opening
    assert "rewound to the start of session 1 by the operator" in opening
