"""The plan survives kill -9: the CLI in a subprocess against the loopback server, killed with
SIGKILL right after a plan change (while the session the change opens waits for its first reply,
a change still scripted after it), then run again; every session after a change opens with the
newest plan whole, as the server's request log shows."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from ouroboros.context.plan import PlanItem, render
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.state.journal import fold
from tests.conftest import Project

pytestmark = pytest.mark.slow  # every test here runs `python -m ouroboros`

FIRST = [
    {"text": "list the modules", "status": "doing"},
    {"text": "write NOTES.md", "status": "todo"},
]
SECOND = [
    {"text": "list the modules", "status": "done", "note": "three of them"},
    {"text": "write NOTES.md", "status": "doing"},
    {"text": "check the notes", "status": "todo"},
]
THIRD = [
    {"text": "list the modules", "status": "done", "note": "three of them"},
    {"text": "write NOTES.md", "status": "done"},
    {"text": "check the notes", "status": "doing"},
]


def shown(items: list[dict[str, Any]]) -> str:
    return render([PlanItem.model_validate(item) for item in items])


def opening(request: dict[str, Any]) -> str:
    return str(next(m["content"] for m in request["messages"] if m["role"] == "user"))


def test_a_plan_survives_kill_9_and_opens_every_session_after_it_whole(project: Project) -> None:
    said = iter(
        [
            Reply(tool_calls=[tool("plan", items=FIRST)]),
            Reply(tool_calls=[tool("shell_exec", command="echo one")]),
            Reply(tool_calls=[tool("shell_exec", command="echo two")]),
            Reply(tool_calls=[tool("plan", items=SECOND)]),
            Reply(tool_calls=[tool("plan", items=THIRD)]),  # only once resumed: killed before
        ]
    )
    waiting, killed = threading.Event(), threading.Event()

    def agent(body: dict[str, Any]) -> Reply:
        if shown(SECOND) in opening(body) and not killed.is_set():
            # Session 3 asks for its first step, the second plan in its opening: killed here.
            waiting.set()
            killed.wait(60)
            return Reply(text="(the run was killed)")
        return next(said, None) or Reply(tool_calls=[tool("shell_exec", command="echo on")])

    with ScriptedServer(agent, dialect="llama", n_ctx=4096) as server:
        # A restart every two turns: the first plan opens session 2, the second is saved at its
        # end and opens session 3, the third is saved in session 3 once resumed.
        project.configure(server.url, session={"max_turns": 2})
        process = project.start("run")
        try:
            assert waiting.wait(60), "session 3 asked for its first step"
            os.kill(process.pid, signal.SIGKILL)
            process.communicate()
        finally:
            killed.set()
        killed_at = len(server.chat_requests())
        saved = [r["plan"] for r in project.records("journal.jsonl") if r.get("plan")]
        assert len(saved) == 2, "two plans saved when killed, the third still to come"
        state, _ = fold(project.state / "journal.jsonl")
        assert render(state.plan.items) == shown(SECOND)
        assert state.plan.changes == 2
        project.configure(server.url, session={"max_turns": 2}, supervisor={"max_total_turns": 9})
        result = project.run("run")
        assert result.returncode == 0, result.stderr
        requests = server.chat_requests()
    state, _ = fold(project.state / "journal.jsonl")
    assert render(state.plan.items) == shown(THIRD)
    assert state.plan.changes == 3
    assert len(requests) > killed_at, "the resumed run made calls"
    assert shown(SECOND) in opening(requests[killed_at]), "resumed with the plan the kill kept"
    firsts: dict[int, str] = {}  # each session's first request, by its number
    for request in requests:
        text = opening(request)
        number = 1 if text.startswith("Session 1 ") else int(text.split(".")[0].split()[1])
        firsts.setdefault(number, text)
    assert sorted(firsts) == [1, 2, 3, 4, 5]
    assert "Your plan" not in firsts[1]
    assert shown(FIRST) in firsts[2]
    assert shown(SECOND) in firsts[3]  # opened before the kill, and again once resumed
    for number in (4, 5):  # every session after the third plan
        assert shown(THIRD) in firsts[number], firsts[number]
