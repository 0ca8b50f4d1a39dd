"""The run's limits and stops: what ends a run, what a session does at its hard line without a
wind-down, and a Ctrl-C in the middle of a tool or of a model call."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from ouroboros.ground import prompts
from ouroboros.ground.clock import FakeClock
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from tests.conftest import Project, wait_for
from tests.inprocess import run_here
from tests.test_context_run import fill_workspace, reader


def worker(body: dict[str, Any]) -> Reply:
    return Reply(text="Working.", tool_calls=[tool("shell_exec", command="echo step")])


def test_max_total_tokens_stops_the_run_and_a_higher_limit_goes_on(project: Project) -> None:
    first = run_here(project, worker, supervisor={"max_total_tokens": 3000})
    used = sum(u["total_tokens"] for u in project.usage())
    second = run_here(project, worker, supervisor={"max_total_tokens": used + 1500})
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    ends = project.events("run_end")
    assert [e["reason"] for e in ends] == ["max_total_tokens", "max_total_tokens"]
    totals = [u["total_tokens"] for u in project.usage()]
    # It stops at the first call that reaches the limit, not one later.
    assert sum(totals[:-1]) < used + 1500 <= sum(totals)
    # A run limit leaves the session open: the second run went on in it.
    assert [s["session"] for s in project.events("session_start")] == [1]


def test_max_wall_time_stops_the_run(project: Project) -> None:
    clock = FakeClock()

    def slow(body: dict[str, Any]) -> Reply:
        clock.advance(1000)  # each reply takes 1,000 s on the run's clock
        return Reply(text="Slowly.", tool_calls=[tool("shell_exec", command="echo step")])

    limits = {"max_wall_time_s": 3600, "max_total_turns": 20}
    ran = run_here(project, slow, clock=clock, supervisor=limits)
    assert "run stopped: max_wall_time" in ran.stdout, ran.stderr
    (end,) = project.events("run_end")
    assert end["reason"] == "max_wall_time"
    # The hour is up during the fourth reply: the run asks for no fifth.
    assert len(project.usage()) == 4


def test_no_wind_down_turns_ends_the_session_at_the_hard_line(project: Project) -> None:
    fill_workspace(project, words=200)
    ran = run_here(
        project,
        reader(),
        session={"wind_down_turns": 0},
        supervisor={"max_restarts": 1, "max_total_turns": 100},
        loops={"session_repeat_after": 0},  # `reader` rereads the same files in every session
    )
    assert "run stopped: max_restarts" in ran.stdout, ran.stderr
    requests = ran.chat_requests()
    notices = project.events("wind_down")
    assert [n["turns_left"] for n in notices] == [0, 0]
    ends = project.events("session_end")
    assert [e["detail"] for e in ends] == ["hard threshold reached"] * 2
    assert not any("Save what matters" in str(b["messages"]) for b in requests)
    journal = project.records("journal.jsonl")
    assert all("message" not in r for r in journal if r["kind"] == "wind_down")


@pytest.mark.slow
def test_ctrl_c_during_a_tool_stops_it_and_the_call_is_never_run_again(project: Project) -> None:
    marker = project.workspace / "started"
    script = [
        Reply(
            tool_calls=[tool("shell_exec", command="echo ran >> runs.log; touch started; sleep 60")]
        ),
        Reply(text="After the stop."),
    ]
    with ScriptedServer(script) as server:
        project.configure(server.url)
        process = project.start("run", "--max-turns", "2")
        wait_for(marker.exists)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
        assert process.returncode == 0, stderr
        assert "Traceback" not in stderr
        (end,) = project.events("run_end")
        assert end["detail"] == "stop requested (SIGINT)"
        resumed = project.run("run", "--max-turns", "2")
        requests = server.chat_requests()
    assert resumed.returncode == 0, resumed.stderr
    assert (project.workspace / "runs.log").read_text() == "ran\n"
    results = [m for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert [r["content"] for r in results] == [prompts.CRASH_INTERRUPTED]


@pytest.mark.slow
def test_ctrl_c_during_a_model_call_asks_it_again_on_resume(project: Project) -> None:
    script = [Reply(text="Never seen.", delay_s=60), Reply(text="Asked again.")]
    with ScriptedServer(script) as server:
        project.configure(server.url)
        process = project.start("run", "--max-turns", "1")
        wait_for(server.chat_requests)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
        assert process.returncode == 0, stderr
        resumed = project.run("run", "--max-turns", "1")
        requests = server.chat_requests()
    assert resumed.returncode == 0, resumed.stderr
    assert [e["reason"] for e in project.events("run_end")] == ["stopped", "max_total_turns"]
    assert requests[1]["messages"] == requests[0]["messages"]
    replies = [r for r in project.records("journal.jsonl") if r["kind"] == "message"]
    assert [r["message"]["content"] for r in replies if "usage" in r] == ["Asked again."]
