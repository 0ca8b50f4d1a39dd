"""Checked progress through `python -m ouroboros` against the loopback server: the operator's
tasks added and imported (bad files refused in one line naming where), a run that passes them
only by their checks, `finish` refused until then, a regression said; and `status`, `tail`,
`task list` and the report showing it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.progress.standing import waiting
from tests.conftest import Project
from tests.test_plan import opening

pytestmark = pytest.mark.slow  # every test here runs `python -m ouroboros`
CLOSED = "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("tasks.jsonl", '{"text": "a", "check": "true"}\n\n{"text": 3}\n', "tasks.jsonl, line 3:"),
        ("tasks.jsonl", '{"text": "a", "check": "true"}\nnot json\n', "tasks.jsonl, line 2:"),
        ("tasks.jsonl", '{"text": "a"}\n', "tasks.jsonl, line 1: the task has no check"),
        ("tasks.toml", '[[task]]\ntext = "a"\ncheck = "true"\n[[task]\n', "line 4"),
        (
            "tasks.toml",
            '[[task]]\ntext = "a\\nb"\ncheck = "true"\n',
            "task 1: its text has a line break",
        ),
        ("tasks.jsonl", "[" * 100_000, "tasks.jsonl, line 1: nested too deep to read"),
        ("tasks.toml", "a = " + "[" * 100_000, "tasks.toml: nested too deep to read"),
    ],
)
def test_a_malformed_import_file_is_refused_in_one_line_naming_where(
    project: Project, name: str, text: str, said: str
) -> None:
    project.configure(CLOSED)
    (project.root / name).write_text(text)
    result = project.run("task", "import", name)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert said in result.stderr
    assert waiting(project.state) == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["  ", "--check", "true"], "the task has no text"),
        (["x", "--check", " "], "the task has no check"),
        (["x" * 600, "--check", "true"], "its text is 600 characters, at most 500"),
    ],
)
def test_a_bad_task_is_refused_in_one_line(project: Project, args: list[str], said: str) -> None:
    project.configure(CLOSED)
    result = project.run("task", "add", *args)
    assert result.returncode == 1
    assert said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert waiting(project.state) == []


def plan(*keys: str) -> Reply:
    items = [{"text": key, "status": "done"} for key in keys]
    return Reply(tool_calls=[tool("plan", items=items)])


def shell(command: str) -> Reply:
    return Reply(tool_calls=[tool("shell_exec", command=command)])


FINISH = Reply(tool_calls=[tool("finish", summary="done")])
FIRST = [
    FINISH,
    plan("T1 hello"),
    shell("echo hello > hello.txt"),
    plan("T1 hello"),
    shell("touch bye.txt"),
    plan("T1 hello", "T2 bye"),
    shell("rm hello.txt"),
]
"""Session 1: finish at once, then the operator's two tasks one by one, each marked done; then
the first broken, and the session waits for its end."""
SECOND = [shell("echo hello > hello.txt"), plan("T1 hello", "T2 bye"), FINISH]
"""Session 2, told of the regression: the first mended, then finish."""


def agent() -> Callable[[dict[str, Any]], Reply]:
    asked: dict[str, int] = {}

    def respond(body: dict[str, Any]) -> Reply:
        script = SECOND if "fail now" in opening(body) else FIRST
        n = asked[opening(body)] = asked.get(opening(body), -1) + 1
        return script[n] if n < len(script) else Reply(text="waiting")

    return respond


def test_a_run_passes_the_operators_tasks_only_by_their_checks(project: Project) -> None:
    project.configure(CLOSED)
    added = project.run("task", "add", "hello", "--check", "grep -q hello hello.txt")
    assert added.returncode == 0, added.stderr
    assert "when it starts" in added.stderr
    (project.root / "more.toml").write_text('[[task]]\ntext = "bye"\ncheck = "test -f bye.txt"\n')
    assert project.run("task", "import", "more.toml").returncode == 0
    assert "(pending) hello" in project.run("task", "list").stdout
    with ScriptedServer(agent()) as server:
        project.configure(server.url, session={"max_turns": 9})
        ran = project.run("run", "--max-turns", "30")
        assert ran.returncode == 0, ran.stderr
        requests = server.chat_requests()
    results = [m for m in requests[1]["messages"] if m["role"] == "tool"]
    refused = results[-1]["content"]
    assert "finish refused: 2 checked item(s) do not pass: T1 (exit 2: " in refused, refused
    assert "; T2 (exit 1). Their checks ran just now" in refused, refused
    told = [m for m in requests[2]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "step 1 stays doing: its check exited 2" in told
    passed = [m for m in requests[4]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "step 1: check passed" in passed
    second = opening(requests[-1])
    assert "Checks that passed before fail now: T1 (exit 2" in second, second
    assert "1. [doing] T1 hello" in second
    assert project.events("run_end")[-1]["reason"] == "finish"
    status = project.run("status").stdout
    assert "checked items pass" in status
    tail = project.run("tail").stdout
    assert "check of T1 passed, marked done" in tail
    assert "check of T1 failed (exit 2), at the session's end" in tail
    listed = project.run("task", "list").stdout
    assert "T2 [passes] bye" in listed
    assert "2 of 2 checked items pass; 0 pending" in listed
    assert "2 of 2 checked items pass, checked" in status
    assert project.run("report").returncode == 0
    page = (project.state / "report.html").read_text()
    assert 'id="burn-up"' in page
    assert '<td class="text">T1</td>' in page
