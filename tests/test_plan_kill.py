"""The plan survives kill -9: the CLI in a subprocess against the loopback server, killed with
SIGKILL right after a plan change, then run again; every session after the change opens with the
newest plan whole, as the server's request log shows."""

from __future__ import annotations

import os
import signal
from typing import Any

from ouroboros.context.plan import PlanItem, render
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.run.journal import fold
from tests.conftest import Project, wait_for

FIRST = [
    {"text": "list the modules", "status": "doing"},
    {"text": "write NOTES.md", "status": "todo"},
]
SECOND = [
    {"text": "list the modules", "status": "done", "note": "three of them"},
    {"text": "write NOTES.md", "status": "doing"},
    {"text": "check the notes", "status": "todo"},
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
            Reply(tool_calls=[tool("plan", items=SECOND)]),
        ]
    )

    def agent(body: dict[str, Any]) -> Reply:
        # After its script the agent works on, slowly enough to be killed between two steps.
        return next(said, None) or Reply(tool_calls=[tool("shell_exec", command="sleep 0.2")])

    with ScriptedServer(agent, dialect="llama", n_ctx=4096) as server:
        # A restart every two turns: the first plan opens session 2, the second is saved in it.
        project.configure(server.url, session={"max_turns": 2})
        process = project.start("run")
        wait_for(lambda: len(project.events("plan")) >= 2, timeout=60)
        os.kill(process.pid, signal.SIGKILL)
        process.communicate()
        assert len(project.events("plan")) == 2, "killed right after the second plan change"
        killed_at = len(server.chat_requests())
        state, _ = fold(project.state / "journal.jsonl")
        assert render(state.plan.items) == shown(SECOND)
        project.configure(server.url, session={"max_turns": 2}, supervisor={"max_total_turns": 9})
        result = project.run("run")
        assert result.returncode == 0, result.stderr
        requests = server.chat_requests()
    assert render(fold(project.state / "journal.jsonl")[0].plan.items) == shown(SECOND)
    assert len(requests) > killed_at, "the resumed run made calls"
    firsts: dict[int, str] = {}  # each session's first request, by its number
    for request in requests:
        text = opening(request)
        number = 1 if text.startswith("Session 1 ") else int(text.split(".")[0].split()[1])
        firsts.setdefault(number, text)
    assert sorted(firsts) == [1, 2, 3, 4, 5]
    assert "Your plan" not in firsts[1]
    assert shown(FIRST) in firsts[2]
    for number in (3, 4, 5):  # every session that started after the change, and the kill
        assert shown(SECOND) in firsts[number], firsts[number]
