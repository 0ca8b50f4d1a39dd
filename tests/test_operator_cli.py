"""`tell`, `pause` and `unpause` from the command line against a run in another process and the
loopback server: one-line errors, a kill -9 between `tell` and delivery, a pause that holds
across a kill and restart (the server's request log shows no call while paused)."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from ouroboros.ground.state_folder import PAUSE_REQUEST
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.operator import inbox
from tests.conftest import Project, wait_for
from tests.test_told_budget import first_shown

pytestmark = pytest.mark.slow  # every test here runs `python -m ouroboros`

TOLD = "stop listing folders; the answer is in README"
CLOSED = "http://127.0.0.1:9/v1"


def agent(body: dict[str, Any]) -> Reply:
    step = sum(1 for m in body["messages"] if m["role"] == "assistant") + 1
    return Reply(tool_calls=[tool("shell_exec", command=f"echo step {step}")], delay_s=0.2)


def told_in(request: dict[str, Any]) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "user" and TOLD in m["content"])


def kinds(project: Project, *wanted: str) -> list[str]:
    return [r["kind"] for r in project.records("journal.jsonl") if r["kind"] in wanted]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["tell"], "say the message, or give --file"),
        (["tell", "   "], "the message is empty"),
        (["tell", "--file", "missing.txt"], "cannot read missing.txt"),
        (["tell", "x" * 20_000], "more than 16,384"),
    ],
)
def test_tell_refuses_bad_input_in_one_line(project: Project, args: list[str], said: str) -> None:
    project.configure(CLOSED)
    result = project.run(*args)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert said in result.stderr
    assert inbox.waiting(project.state) == []


def test_tell_from_a_file_to_a_stopped_run_is_kept_until_it_starts(project: Project) -> None:
    (project.root / "note.txt").write_text(TOLD)
    project.configure(CLOSED)
    result = project.run("tell", "--file", "note.txt")
    assert result.returncode == 0, result.stderr
    assert "when it starts" in result.stderr
    assert [inbox.read(project.state, i).text for i in inbox.waiting(project.state)] == [TOLD]
    with ScriptedServer(agent) as server:
        project.configure(server.url)
        status = project.run("status")
        assert "1 message(s) from `tell` pending" in status.stdout
        assert project.run("run", "--max-turns", "2").returncode == 0
        requests = server.chat_requests()
    assert [told_in(r) for r in requests] == [1, 1]
    assert "1 delivered" in project.run("status").stdout
    assert TOLD in project.run("tail").stdout
    assert project.run("report").returncode == 0
    page = (project.state / "report.html").read_text()
    assert f'<td class="text">{TOLD}</td>' in page.split('id="operator"')[1]


def test_tell_then_kill_9_before_delivery_delivers_it_once_after_restart(
    project: Project,
) -> None:
    released = threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        # The run killed is still waiting for its first answer; the one restarted is answered.
        return replace(agent(body), delay_s=0 if released.is_set() else 60)

    with ScriptedServer(held) as server:
        project.configure(server.url)
        process = project.start("run")
        wait_for(lambda: server.chat_requests())
        assert project.run("tell", TOLD).returncode == 0  # the model is still answering
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=20)
        released.set()
        assert kinds(project, "told") == []
        assert len(inbox.waiting(project.state)) == 1
        assert project.run("run", "--max-turns", "4").returncode == 0
        requests = server.chat_requests()
    assert kinds(project, "told") == ["told"]
    assert told_in(requests[-1]) == 1
    assert all(told_in(r) <= 1 for r in requests)
    assert inbox.waiting(project.state) == []


def test_a_pause_holds_across_kill_9_and_restart_with_no_model_call(project: Project) -> None:
    asked, called = project.state / PAUSE_REQUEST, threading.Event()

    def answers_once_asked_to_pause(body: dict[str, Any]) -> Reply:
        # The first reply waits for the request: the run cannot use up its turns before `pause`
        # reaches it, however slowly that command starts.
        if not any(m["role"] == "assistant" for m in body["messages"]):
            called.set()
            wait_for(asked.exists, timeout=60)
        return agent(body)

    with ScriptedServer(answers_once_asked_to_pause) as server:
        project.configure(server.url)
        process = project.start("run", "--max-turns", "4")
        wait_for(called.is_set)
        assert project.run("pause").returncode == 0
        wait_for(lambda: kinds(project, "paused"))
        calls = len(server.chat_requests())
        assert "paused" in project.run("status").stdout
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=20)
        restarted = project.start("run", "--max-turns", "4")
        wait_for(lambda: kinds(project, "run_start") == ["run_start"] * 2)
        time.sleep(1)  # the restarted run looks for `unpause` twice a second meanwhile
        assert len(server.chat_requests()) == calls, "a paused run called the model"
        status = project.run("status").stdout
        assert "since" in status
        assert "by operator" in status
        assert project.run("unpause").returncode == 0
        _, stderr = restarted.communicate(timeout=30)
        assert restarted.returncode == 0, stderr
        assert len(server.chat_requests()) == 4
    assert kinds(project, "paused", "unpaused") == ["paused", "unpaused"]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_a_paused_run_at_once_and_it_stays_paused(
    project: Project, stop: signal.Signals
) -> None:
    with ScriptedServer(agent) as server:
        project.configure(server.url)
        assert project.run("pause").returncode == 0  # a run not running starts paused
        process = project.start("run")
        wait_for(lambda: kinds(project, "paused"))
        process.send_signal(stop)
        _, stderr = process.communicate(timeout=20)
        assert server.chat_requests() == []
    assert process.returncode == 0, stderr
    assert project.events("run_end")[-1]["reason"] == "stopped"
    assert kinds(project, "paused", "unpaused") == ["paused"]


def test_56_messages_at_a_4k_window_each_in_exactly_one_accepted_request(
    project: Project,
) -> None:
    """16 told before the run and 40 during it (two a step), through the CLI against a server
    that refuses what does not fit its 4,096 tokens: the run makes its turns, and each message
    first sits in one accepted request, never shown anew."""

    def note(i: int) -> str:
        return f"NOTE{i:03d} " + " ".join(f"k{j % 10}" for j in range(130))

    project.configure(CLOSED)
    assert project.run("tell", note(0)).returncode == 0
    for i in range(1, 16):
        inbox.post(project.state, note(i))  # as `tell` does, without starting Python each time
    later = iter(range(16, 56))
    accepted: list[set[str]] = []

    def respond(body: dict[str, Any]) -> Reply:
        if server.fit(body)[1] is not None:
            return agent(body)  # refused: the server sends its error, not this
        words = {w for m in body["messages"] if m["role"] == "user" for w in m["content"].split()}
        accepted.append({w for w in words if w.startswith("NOTE")})
        if len(set().union(*accepted)) == 56:
            return Reply(tool_calls=[tool("finish", summary="read all 56")])
        for _ in range(2):
            if (i := next(later, None)) is not None:
                inbox.post(project.state, note(i))
        return replace(agent(body), delay_s=0)

    with ScriptedServer(respond, dialect="llama", n_ctx=4096) as server:
        project.configure(server.url)
        ran = project.run("run", "--max-turns", "120")
    assert ran.returncode == 0, ran.stderr
    assert "run stopped: finish" in ran.stdout
    assert first_shown(accepted) == {f"NOTE{i:03d}": 1 for i in range(56)}
    assert "56 delivered" in project.run("status").stdout
