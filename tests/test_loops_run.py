"""Scripted loops of every kind through a whole run in the process (`run_here`): each caught at
its stated threshold (the agent is told in the request after the step that made it, not
before), and the escalation nudge -> restart -> stop as `stuck`, shown by `status` and `tail`."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from ouroboros.ground.config import LoopSettings
from ouroboros.ground.config_file import load_settings
from ouroboros.model.llm import ContextOverflow
from ouroboros.model.scripted import Reply, tool
from ouroboros.observe.describe import describe
from ouroboros.observe.report import notable_table
from ouroboros.observe.status import read_status, render_status
from tests.conftest import Project
from tests.inprocess import Scripted, run_here

TOLD = "You are going in circles"
FINISH = Reply(tool_calls=[tool("finish", summary="done")])


def shell(command: str) -> Reply:
    return Reply(tool_calls=[tool("shell_exec", command=command)])


def told_at(ran: Any) -> list[int]:
    """The requests (1-based) whose newest message is the loop's nudge."""
    return [
        n
        for n, body in enumerate(ran.chat_requests(), start=1)
        if TOLD in str(body["messages"][-1].get("content"))
    ]


def caught(project: Project) -> list[tuple[str, int]]:
    return [(e["loop"], e["level"]) for e in project.events("loop")]


def test_the_same_call_is_caught_at_its_third_time(project: Project) -> None:
    ran = run_here(project, [shell("ls")] * LoopSettings().repeat_after + [FINISH])
    assert caught(project) == [("repeat", 1)]
    assert told_at(ran) == [4]
    assert "same tool call 3 times" in json.dumps(ran.chat_requests()[3]["messages"][-1])


def test_a_cycle_of_two_calls_is_caught_at_its_third_turn(project: Project) -> None:
    ran = run_here(project, [shell("ls"), shell("pwd")] * 3 + [FINISH])
    assert caught(project) == [("cycle", 1)]
    assert told_at(ran) == [7]


def test_the_same_failure_among_failures_is_caught_at_its_third_time(project: Project) -> None:
    a, b, c = shell("echo no; exit 1"), shell("echo b; exit 2"), shell("echo c; exit 3")
    ran = run_here(project, [a, b, a, c, a, FINISH])
    assert caught(project) == [("failing", 1)]
    assert told_at(ran) == [6]


def test_replies_without_a_call_are_caught_at_the_third(project: Project) -> None:
    ran = run_here(project, [Reply(text="Thinking.")] * 3 + [FINISH])
    assert caught(project) == [("no_calls", 1)]
    assert told_at(ran) == [4]


def test_refused_prompts_are_caught_at_the_third(project: Project) -> None:
    (project.workspace / "big.txt").write_text(" ".join(f"w{i}" for i in range(400)))
    turns = iter(range(10**6))

    def agent(body: dict[str, Any]) -> Reply:
        # Every sixth request refused as too long; the harness masks and asks again.
        if (n := next(turns)) % 6 == 5:
            raise ContextOverflow("request exceeds the available context size", 4000, 4096)
        return Reply(tool_calls=[tool("file_read", path="big.txt", offset=n % 50 + 1)])

    run_here(project, Scripted(agent), supervisor={"max_total_turns": 22})
    # The first made room (no loop: the harness recovered); the next two could not, and each
    # ended its session; a refusal in the third session after them is the third in a row.
    ends = [e["reason"] for e in project.events("session_end")]
    assert ends[:2] == ["context_overflow"] * 2
    assert len(project.events("context_overflow")) >= 4
    assert caught(project)[:1] == [("overflows", 1)]


def test_a_session_that_redoes_the_previous_one_is_caught_at_its_fifth_call(
    project: Project,
) -> None:
    work = [shell(f"echo step {n}") for n in range(5)]
    ran = run_here(project, [*work, *work, FINISH], session={"max_turns": 5})
    assert caught(project) == [("session_repeat", 1)]
    assert [s["session"] for s in project.events("session_start")] == [1, 2, 3]
    # Session 2 ended at its turn limit as the loop was named: session 3 carries none of it
    # over, and its opening names the loop in one line.
    third = next(b for b in ran.chat_requests() if "Session 3." in json.dumps(b))
    opening = third["messages"][1]["content"]
    assert "after going in circles (this session redid the previous session's calls" in opening
    assert [m["role"] for m in third["messages"]] == ["system", "user"]


@pytest.mark.slow
def test_a_loop_is_nudged_then_restarted_then_stops_the_run_as_stuck(project: Project) -> None:
    ran = run_here(
        project,
        lambda body: shell("ls"),
        loops={"max_loops": 1},
        supervisor={"max_total_turns": 100},
    )
    # Session 1: told at the 3rd, restarted at the 6th (after 2 wind-down replies); session 2:
    # told, then stopped.
    assert caught(project) == [("repeat", 1), ("repeat", 2), ("repeat", 1), ("repeat", 3)]
    assert [e["reason"] for e in project.events("session_end")] == ["loop"]
    assert [e["reason"] for e in project.events("run_end")] == ["stuck"]
    assert "run stopped: stuck" in ran.stdout
    opening = next(b for b in ran.chat_requests() if "Session 2." in json.dumps(b))
    assert "going in circles (you made the same tool call" in json.dumps(opening)
    assert len(ran.chat_requests()) == 3 + 3 + 2 + 3 + 3

    line = describe(project.events("loop")[-1])
    assert line is not None
    assert "loop repeat -> stuck" in line.plain
    out = io.StringIO()
    settings = load_settings(project.root / "config.toml")
    panel = render_status(read_status(project.state), lambda: settings)
    Console(file=out, width=200).print(panel)
    assert "4 caught" in out.getvalue()
    assert "repeat -> stuck" in out.getvalue()
    listed = notable_table(project.events())
    assert "loop <b>4</b>" in listed
    assert "repeat -&gt; stuck: the same call" in listed  # in words, as tail says it
    assert "repeat -> stuck" in out.getvalue()


@pytest.mark.slow
def test_the_escalation_goes_on_across_resumes(project: Project) -> None:
    """The counts are the run's, in the fold: a resumed run goes on from where it stopped (the
    session's nudge from the journal, the restarts from the snapshot of the session start)."""
    model = Scripted(lambda body: shell("ls"))
    for turns in (3, 6, 8, 14):
        run_here(project, model, loops={"max_loops": 1}, supervisor={"max_total_turns": turns})
    assert caught(project) == [("repeat", 1), ("repeat", 2), ("repeat", 1), ("repeat", 3)]
    assert [e["reason"] for e in project.events("run_end")][-1] == "stuck"
    assert len(model.chat_requests()) == 14


def test_a_restart_for_a_loop_carries_none_of_it_and_names_it_without_its_words(
    project: Project,
) -> None:
    """A small model copies what it sees: the session after a loop starts from the task and one
    line naming the loop, with no step of the last session and none of the words it repeated."""
    said = "I will now think very hard about the task before I act on it."
    ran = run_here(
        project,
        [Reply(text=said)] * 8 + [FINISH],
        loops={"max_loops": 2},
        supervisor={"max_total_turns": 9},
    )
    assert ran.returncode == 0, ran.stderr
    assert [e["reason"] for e in project.events("session_end")][:1] == ["loop"]
    second = next(b for b in ran.chat_requests() if "Session 2." in json.dumps(b))
    assert [m["role"] for m in second["messages"]] == ["system", "user"]
    opening = second["messages"][1]["content"]
    assert "going in circles (you gave 3 replies without a tool call)" in opening
    assert said not in opening
    assert "Your task:" in opening
