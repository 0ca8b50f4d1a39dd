"""search_context over recorded journals, and the ambient summary a new session starts with."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from ouroboros.context.carryover import recent_actions
from ouroboros.ground import prompts
from ouroboros.ground.jsonl import Problem
from ouroboros.ground.messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from ouroboros.model.scripted import Reply, tool
from ouroboros.tools.search import search_commands, search_logs, search_sessions
from tests.conftest import Project
from tests.inprocess import run_here


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A whole run with two sessions: commands that pass and fail, a file read, a restart."""
    root = tmp_path_factory.mktemp("search") / "project"
    (root / "workspace").mkdir(parents=True)
    (root / "SYSTEM_PROMPT.md").write_text("# Purpose\nTest search.\n")
    (root / "workspace" / "notes.md").write_text("The Deploy Key is in vault/keys.\n")
    project = Project(root)
    script = itertools.cycle(
        [
            Reply(tool_calls=[tool("shell_exec", command="echo building; exit 0")]),
            Reply(tool_calls=[tool("shell_exec", command="pytest -q tests/unit; exit 1")]),
            Reply(tool_calls=[tool("file_read", path="notes.md")]),
            Reply(tool_calls=[tool("shell_exec", command="make deploy; exit 2")]),
        ]
    )
    ran = run_here(
        project,
        lambda body: next(script),
        session={"max_turns": 4},
        supervisor={"max_total_turns": 6},
    )
    assert ran.returncode == 0, ran.stderr
    return project


@pytest.mark.slow
def test_sessions_are_searched_case_insensitively(recorded: Project) -> None:
    found = search_sessions(recorded.state / "journal.jsonl", "deploy key", 20, [])
    assert len(found) == 1
    assert found[0].startswith("[session 1 ")
    assert "tool file_read] The Deploy Key is in vault/keys." in found[0]
    calls = search_sessions(recorded.state / "journal.jsonl", "MAKE DEPLOY", 20, [])
    assert any("assistant" in line and "make deploy" in line for line in calls)


def test_commands_with_exit_codes_and_filters(recorded: Project) -> None:
    journal = recorded.state / "journal.jsonl"
    every = search_commands(journal, "", None, 50, [])
    assert [line.split("] ", 1)[1] for line in every] == [
        "exit 0: echo building; exit 0",
        "exit 1: pytest -q tests/unit; exit 1",
        "exit 2: make deploy; exit 2",
        "exit 0: echo building; exit 0",
        "exit 1: pytest -q tests/unit; exit 1",
    ]
    assert every[-1].startswith("[session 2 ")
    failures = search_commands(journal, "", -1, 50, [])
    assert [line.split(": ", 1)[0].rsplit("] ", 1)[1] for line in failures] == [
        "exit 1",
        "exit 2",
        "exit 1",
    ]
    assert len(search_commands(journal, "PYTEST", 1, 50, [])) == 2
    assert len(search_commands(journal, "", None, 2, [])) == 2


def test_logs_by_type(recorded: Project) -> None:
    events = recorded.state / "events.jsonl"
    restarts = search_logs(events, "", "session_restart", 20, [])
    assert len(restarts) == 1
    assert '"previous_turns": 4' in restarts[0]
    assert search_logs(events, "make deploy", "", 20, []) == []  # arguments are not logged
    assert len(search_logs(events, "", "tool_call", 3, [])) == 3


def test_agent_uses_search_context_in_a_run(recorded: Project, tmp_path: Path) -> None:
    import shutil

    project = Project(tmp_path / "copy")
    shutil.copytree(recorded.root, project.root)
    script = [
        Reply(tool_calls=[tool("search_context", source="commands", exit_code=-1, last_n=5)]),
        Reply(tool_calls=[tool("search_context", source="logs", type="no_such_kind")]),
        Reply(tool_calls=[tool("search_context", source="sessions", last_n=99)]),
    ]
    ran = run_here(project, script, supervisor={"max_total_turns": 9})
    assert ran.returncode == 0, ran.stderr
    results = [
        r["message"]["content"]
        for r in project.records("journal.jsonl")
        if r["kind"] == "message" and r["message"]["kind"] == "tool"
    ]
    assert results[-3].startswith("3 newest matches in commands")
    assert "exit 2: make deploy" in results[-3]
    assert results[-2] == "error: nothing in logs matches ''"
    assert "last_n: Input should be less than or equal to 50" in results[-1]


def test_torn_last_line_is_not_searched(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    journal.write_text(
        '{"v":1,"ts":"2026-01-01T00:00:00","kind":"message","session":1,'
        '"message":{"kind":"user","content":"alpha","origin":"user"}}\n'
        '{"v":1,"ts":"2026-01-01T00:00:01","kind":"message","session":1,"message":{"kind":"us'
    )
    assert len(search_sessions(journal, "", 20, [])) == 1


def test_a_bad_line_is_skipped_and_said(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    good = (
        '{"v":1,"ts":"2026-01-01T00:00:00","kind":"message","session":1,'
        '"message":{"kind":"user","content":"alpha %s","origin":"user"}}\n'
    )
    journal.write_text(good % 1 + '{"kind":"message" "alpha"\n' + good % 2)
    skipped: list[Problem] = []
    found = search_sessions(journal, "alpha", 20, skipped)
    assert [line[-7:] for line in found] == ["alpha 2", "alpha 1"]  # newest first
    assert [str(p) for p in skipped] == [
        "journal.jsonl, line 2: not a JSON object; skipped (the file keeps it)"
    ]


def _history() -> list[Message]:
    def call(i: int, name: str, **args: Any) -> ToolCall:
        import json

        return ToolCall(id=f"c{i}", name=name, arguments=json.dumps(args))

    return [
        UserMessage(content="go"),
        AssistantMessage(tool_calls=(call(1, "file_read", path="src/app.py"),)),
        ToolMessage(tool_call_id="c1", name="file_read", content="import os"),
        AssistantMessage(
            tool_calls=(
                call(2, "shell_exec", command="python -m pytest -q   tests"),
                call(3, "file_write", path="NOTES.md", content="x"),
            )
        ),
        ToolMessage(tool_call_id="c2", name="shell_exec", content="exit code 1\nF", exit_code=1),
        ToolMessage(tool_call_id="c3", name="file_write", content="error: disk full", error=True),
        AssistantMessage(tool_calls=(call(4, "list_dir", path="."),)),
    ]


def test_ambient_summary_exact_text() -> None:
    assert recent_actions(_history(), 3) == [
        "shell_exec python -m pytest -q tests → exit 1",
        "file_write NOTES.md → error",
        "list_dir . → no result",
    ]
    assert recent_actions(_history(), 0) == []
    assert len(recent_actions(_history(), 10)) == 4


def test_ambient_summary_in_the_restart_marker(recorded: Project) -> None:
    journal = recorded.records("journal.jsonl")
    second = next(r for r in journal if r["kind"] == "session_start" and r["session"] == 2)
    marker = second["messages"][1]["content"]
    # The task follows the actions, then the calls that failed (`deadends/`).
    assert (
        marker.split(prompts.DEAD_ENDS)[0]
        .split("\n\nYour task:")[0]
        .endswith(
            "Its last actions:\n"
            "- shell_exec echo building; exit 0 → exit 0\n"
            "- shell_exec pytest -q tests/unit; exit 1 → exit 1\n"
            "- file_read notes.md → ok\n"
            "- shell_exec make deploy; exit 2 → exit 2"
        )
    )
