"""Checked progress in whole runs in this process: a step marked done is done only while its
check passes (the agent told why it is not), `finish` is refused while one fails, a regression
at a session's end is said in the next opening, a run that passes no new check stops as
`stalled` (and its hook runs), and the operator's tasks, thousands of them, fit the opening.
The same through the CLI: tests/test_progress_cli.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ouroboros.context.plan import plan_tokens
from ouroboros.ground.errors import RunError
from ouroboros.ground.state_folder import TASKS
from ouroboros.model.scripted import Reply, count_tokens, tool
from ouroboros.progress import tasks
from ouroboros.progress.records import Progress, Task
from ouroboros.progress.standing import waiting
from ouroboros.state.journal import fold
from tests.conftest import Project, wait_for
from tests.inprocess import run_here
from tests.test_hooks import recorded, recorder
from tests.test_plan import opening

HELLO = {"text": "write hello.txt", "status": "done", "check": "grep -q hello hello.txt"}
NO_WRITE_CHECKS = {"checks_after_write": 0}
"""For the tests of what session ends and `finish` check: checks after a write, which would run
between, have tests of their own."""


def plans(*items: dict[str, Any]) -> Reply:
    return Reply(tool_calls=[tool("plan", items=list(items))])


def results(request: dict[str, Any], name: str) -> list[str]:
    return [
        str(m["content"])
        for m in request["messages"]
        if m["role"] == "tool" and m.get("name", name) == name
    ]


def checks(project: Project) -> list[tuple[str, int | None, str]]:
    return [
        (r["item"], r["exit_code"], r["when"])
        for r in project.records("journal.jsonl")
        if r["kind"] == "check"
    ]


def test_a_step_is_done_only_once_its_check_passes_and_finish_waits_for_it(
    project: Project,
) -> None:
    script = [
        plans(HELLO),
        Reply(tool_calls=[tool("finish", summary="all done")]),
        Reply(tool_calls=[tool("shell_exec", command="echo hello > hello.txt")]),
        plans(HELLO),
        Reply(tool_calls=[tool("finish", summary="all done")]),
    ]
    ran = run_here(project, script, supervisor={"max_total_turns": 10})
    assert ran.returncode == 0, ran.stderr
    requests = ran.chat_requests()
    told = requests[1]["messages"][-1]["content"]
    assert "step 1 stays doing: its check exited 2" in told, told
    assert "hello.txt" in told  # the tail of what grep said
    refused = requests[2]["messages"][-1]["content"]
    assert "finish refused: 1 checked item(s) do not pass: write hello.txt" in refused
    assert "step 1: check passed" in requests[4]["messages"][-1]["content"]
    assert checks(project) == [
        ("write hello.txt", 2, "done"),
        ("write hello.txt", 2, "finish"),
        ("write hello.txt", 0, "done"),
        ("write hello.txt", 0, "finish"),
    ]
    saved = [r["plan"] for r in project.records("journal.jsonl") if r.get("plan")]
    assert [[i["status"] for i in plan] for plan in saved] == [["doing"], ["done"]]
    state = fold(project.state / "journal.jsonl")[0]
    assert [i.status for i in state.plan.items] == ["done"]
    assert state.run_end is not None
    assert state.run_end.reason == "finish"


def test_finish_is_accepted_with_failing_checks_when_the_setting_is_off(project: Project) -> None:
    script = [plans(HELLO), Reply(tool_calls=[tool("finish", summary="enough")])]
    ran = run_here(
        project, script, progress={"finish_needs_checks": False}, supervisor={"max_total_turns": 5}
    )
    assert ran.returncode == 0, ran.stderr
    assert project.events("run_end")[-1]["reason"] == "finish"


def test_a_regression_at_a_session_end_is_caught_and_said_in_the_next_opening(
    project: Project,
) -> None:
    script = [
        Reply(tool_calls=[tool("shell_exec", command="echo hello > hello.txt")]),
        plans(HELLO),
        Reply(tool_calls=[tool("shell_exec", command="rm hello.txt")]),
        Reply(text="thinking"),
    ]
    ran = run_here(project, script, session={"max_turns": 3}, supervisor={"max_total_turns": 4})
    assert ran.returncode == 0, ran.stderr
    assert checks(project) == [
        ("write hello.txt", 0, "done"),
        ("write hello.txt", 2, "session_end"),
    ]
    second = opening(ran.chat_requests()[3])
    assert "Checks that passed before fail now: write hello.txt (exit 2" in second, second
    assert "[doing] write hello.txt" in second


def test_a_checked_step_that_never_passes_stops_the_run_as_stalled_and_its_hook_runs(
    project: Project,
) -> None:
    out = project.root / "hooked.jsonl"
    never = {"text": "make it pass", "status": "done", "check": "false"}
    script = [plans(never), *[Reply(tool_calls=[tool("list_dir")]) for _ in range(20)]]
    ran = run_here(
        project,
        script,
        session={"max_turns": 2},
        progress={"stall_sessions": 2},
        supervisor={"max_total_turns": 40},
        hooks={"min_interval_s": 0, "on": [{"events": ["stalled"], "command": recorder(out)}]},
    )
    assert ran.returncode == 0, ran.stderr
    end = project.events("run_end")[-1]
    assert end["reason"] == "stalled", end
    assert [e["session"] for e in project.events("session_start")] == [1, 2, 3]
    told = opening(ran.chat_requests()[-1])
    assert "No check newly passed in 2 sessions (failing: make it pass)" in told, told
    wait_for(lambda: recorded(out))
    assert [e["event"] for e in recorded(out)] == ["stalled"]


def ten_sessions_of_one_turn(project: Project, *first: Reply) -> None:
    """`first`, then `list_dir` calls: ten sessions of one turn, stalls told after two."""
    script = [*first, *[Reply(tool_calls=[tool("list_dir")]) for _ in range(12)]]
    ran = run_here(
        project,
        script,
        session={"max_turns": 1},
        progress={"stall_sessions": 2},
        supervisor={"max_total_turns": 10},
    )
    assert ran.returncode == 0, ran.stderr
    assert project.events("run_end")[-1]["reason"] == "max_total_turns"


def test_a_run_without_checked_items_never_stalls(project: Project) -> None:
    ten_sessions_of_one_turn(project)
    assert len(project.events("session_start")) == 10


def test_a_run_whose_checked_items_all_pass_never_stalls(project: Project) -> None:
    """Nothing is left to pass: sessions without a new pass are no stall (the run is not told
    to pass one, with no item failing, nor stopped)."""
    ten_sessions_of_one_turn(project, plans({"text": "ok", "status": "done", "check": "true"}))
    assert not project.events("stalling")


def test_the_agent_passes_an_operators_task_only_by_the_operators_check(project: Project) -> None:
    tasks.post(project.state, [Task(text="write hello.txt", check="grep -q hello hello.txt")])
    own = {"text": "T1 write hello.txt", "status": "done", "check": "true"}
    script = [
        plans(own),
        Reply(tool_calls=[tool("shell_exec", command="echo hello > hello.txt")]),
        plans(own),
        Reply(tool_calls=[tool("finish", summary="done")]),
    ]
    ran = run_here(
        project,
        script,
        session={"max_turns": 2},
        supervisor={"max_total_turns": 6},
        progress=NO_WRITE_CHECKS,
    )
    assert ran.returncode == 0, ran.stderr
    assert len(project.events("session_start")) == 2  # its own check is no item of its own
    assert "Operator's tasks: 0 of 1 pass" in opening(ran.chat_requests()[0])
    assert "T1 [todo] write hello.txt" in opening(ran.chat_requests()[0])
    assert checks(project) == [
        ("T1", 2, "done"),
        ("T1", 0, "session_end"),
        ("T1", 0, "done"),
        ("T1", 0, "finish"),
    ]
    state = fold(project.state / "journal.jsonl")[0]
    assert list(state.part(Progress).items) == ["T1"]  # status counts 1 of 1
    assert project.events("run_end")[-1]["reason"] == "finish"
    assert waiting(project.state) == []


def test_5000_operator_tasks_keep_the_first_request_within_its_budget(project: Project) -> None:
    # Long ones: five open tasks whole would take more than the plan's share at this window.
    check = " && ".join(f"grep -q 'case {n}' results.txt" for n in range(5))
    many = [Task(text=f"make case {n} pass, " + "so " * 40, check=check) for n in range(1, 5001)]
    tasks.post(project.state, many)
    ran = run_here(project, [Reply(text="hi")], window=4096, supervisor={"max_total_turns": 1})
    assert ran.returncode == 0, ran.stderr
    first = ran.chat_requests()[0]
    said = opening(first)
    assert "Operator's tasks: 0 of 5000 pass" in said
    assert "T1 [todo] make case 1 pass" in said
    listed = said[said.index("Operator's tasks") :]
    state = fold(project.state / "journal.jsonl")[0]
    assert state.window is not None
    budget = state.window.prompt_budget
    assert count_tokens({"messages": [{"role": "user", "content": listed}]}) <= plan_tokens(budget)
    assert count_tokens(first) <= budget
    assert len(state.part(Progress).tasks) == 5000


def test_a_tasks_file_not_written_by_task_is_set_aside(project: Project) -> None:
    folder = project.state / TASKS
    folder.mkdir(parents=True)
    (folder / "0001-bad.json").write_text(json.dumps({"not": "a list"}))
    ran = run_here(project, [Reply(text="hi")], supervisor={"max_total_turns": 1})
    assert ran.returncode == 0, ran.stderr
    assert (folder / "0001-bad.json.rejected").exists()
    assert "Operator's tasks" not in opening(ran.chat_requests()[0])


@pytest.mark.parametrize(
    "plant",
    [
        lambda path: os.mkfifo(path),
        lambda path: path.symlink_to("/dev/zero"),
        lambda path: path.write_text("[" * 100_000),  # past the JSON parser's depth
        lambda path: path.write_text(
            json.dumps([{"text": "t", "check": "true"}] * (tasks.MAX_TASKS + 1))
        ),
    ],
    ids=["FIFO", "link to /dev/zero", "nested deep", "more than a task command leaves"],
)
def test_a_planted_tasks_file_is_set_aside_never_a_hang_or_a_crash(
    project: Project, plant: Callable[[Path], None]
) -> None:
    """The tasks folder is read as the inbox is: no link followed, no FIFO waited on."""
    folder = project.state / TASKS
    folder.mkdir(parents=True)
    plant(folder / "0001-bad.json")
    ran = run_here(project, [Reply(text="hi")], supervisor={"max_total_turns": 1})
    assert ran.returncode == 0, ran.stderr
    assert os.path.lexists(folder / "0001-bad.json.rejected")
    assert not os.path.lexists(folder / "0001-bad.json")


def test_a_step_whose_check_changed_is_checked_again_and_a_dropped_one_holds_nothing(
    project: Project,
) -> None:
    step = {"text": "tests pass", "status": "done"}
    script = [
        plans({**step, "check": "true"}),
        plans({**step, "check": "false"}),
        Reply(tool_calls=[tool("finish", summary="done")]),
        plans(),
        Reply(tool_calls=[tool("finish", summary="done")]),
    ]
    ran = run_here(project, script, supervisor={"max_total_turns": 8})
    assert ran.returncode == 0, ran.stderr
    assert checks(project) == [
        ("tests pass", 0, "done"),
        ("tests pass", 1, "done"),
        ("tests pass", 1, "finish"),
    ]
    assert "finish refused" in ran.chat_requests()[3]["messages"][-1]["content"]
    assert project.events("run_end")[-1]["reason"] == "finish"


def test_a_failing_step_the_agent_dropped_from_its_plan_counts_for_no_stall(
    project: Project,
) -> None:
    never = {"text": "make it pass", "status": "done", "check": "false"}
    ten_sessions_of_one_turn(project, plans(never), plans())
    assert not project.events("stalling")
    status = json.loads((project.state / "status.json").read_text())
    assert status["run"]["progress"]["failing"] == [], status["run"]["progress"]


def test_a_tasks_folder_that_is_a_link_is_not_read_through(project: Project) -> None:
    """A link planted for the folder itself: the files where it points are neither taken nor
    removed nor renamed."""
    elsewhere = project.root / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "0001-a.json").write_text(json.dumps([{"text": "a", "check": "true"}]))
    (elsewhere / "0002-b.json").write_text("not tasks")
    project.state.mkdir(parents=True, exist_ok=True)
    (project.state / TASKS).symlink_to(elsewhere)
    ran = run_here(project, [Reply(text="hi")], supervisor={"max_total_turns": 1})
    assert ran.returncode == 0, ran.stderr
    assert sorted(os.listdir(elsewhere)) == ["0001-a.json", "0002-b.json"]
    assert "Operator's tasks" not in opening(ran.chat_requests()[0])
    with pytest.raises(RunError, match="tasks is a link, which the run does not read through"):
        tasks.post(project.state, [Task(text="b", check="true")])
    assert len(os.listdir(elsewhere)) == 2, "a task was left where the run never looks"


def shell(command: str) -> Reply:
    return Reply(tool_calls=[tool("shell_exec", command=command)])


FINISH = Reply(tool_calls=[tool("finish", summary="done")])


def told(request: dict[str, Any]) -> str:
    """The newest message of a request: the result of the call before it."""
    return str(request["messages"][-1]["content"])


@pytest.mark.parametrize(
    "item",
    [
        {"text": "T1 make done.txt", "status": "done"},
        {"text": "make done.txt", "status": "done", "check": "test -f done.txt"},
    ],
    ids=["operator's task", "agent's own step"],
)
def test_finish_runs_each_check_again_and_is_refused_once_the_work_is_undone(
    project: Project, item: dict[str, Any]
) -> None:
    """A check that passed once is no pass at `finish`: the run ends on checks run then."""
    if "check" not in item:
        tasks.post(project.state, [Task(text="make done.txt", check="test -f done.txt")])
    key = "T1" if "check" not in item else "make done.txt"
    script = [shell("touch done.txt"), plans(item), shell("rm done.txt"), FINISH]
    script += [shell("touch done.txt"), FINISH]
    ran = run_here(project, script, supervisor={"max_total_turns": 8}, progress=NO_WRITE_CHECKS)
    assert ran.returncode == 0, ran.stderr
    requests = ran.chat_requests()
    assert "check passed" in told(requests[2])
    refused = told(requests[4])
    assert f"finish refused: 1 checked item(s) do not pass: {key} (exit 1)" in refused, refused
    assert checks(project)[-2:] == [(key, 1, "finish"), (key, 0, "finish")]
    assert project.events("run_end")[-1]["reason"] == "finish"
    said = json.loads((project.state / "status.json").read_text())["run"]["progress"]
    assert (said["passing"], said["total"]) == (1, 1)


def test_an_operators_task_passes_by_its_check_unnamed_at_a_session_end_and_at_finish(
    project: Project,
) -> None:
    """The agent never plans `T1 ...`: its check runs as the session ends (the next opening
    counts it) and, for a task no check judged yet, at `finish` before the run ends."""
    tasks.post(
        project.state,
        [
            Task(text="write hello.txt", check="grep -q hello hello.txt"),
            Task(text="write bye.txt", check="test -f bye.txt"),
        ],
    )
    script = [shell("echo hello > hello.txt"), shell("touch bye.txt"), FINISH]
    ran = run_here(
        project,
        script,
        session={"max_turns": 1},
        supervisor={"max_total_turns": 5},
        progress=NO_WRITE_CHECKS,
    )
    assert ran.returncode == 0, ran.stderr
    assert "Operator's tasks: 1 of 2 pass" in opening(ran.chat_requests()[1])
    assert checks(project) == [
        ("T1", 0, "session_end"),
        ("T2", 1, "session_end"),
        ("T1", 0, "session_end"),
        ("T2", 0, "session_end"),
        ("T1", 0, "finish"),
        ("T2", 0, "finish"),
    ]
    assert project.events("run_end")[-1]["reason"] == "finish"


def test_a_finish_with_a_task_no_check_judged_yet_runs_its_check_first(project: Project) -> None:
    tasks.post(project.state, [Task(text="write hello.txt", check="grep -q hello hello.txt")])
    ran = run_here(project, [shell("echo hello > hello.txt"), FINISH], progress=NO_WRITE_CHECKS)
    assert ran.returncode == 0, ran.stderr
    assert checks(project) == [("T1", 0, "finish")]
    assert project.events("run_end")[-1]["reason"] == "finish"


def test_a_step_named_as_a_task_not_there_yet_never_passes_by_its_own_check(
    project: Project,
) -> None:
    """`T3` names the operator's third task, there or not: the agent's own check on it is never
    run, so task 3 taken later starts as it should, and every view counts the same."""
    tasks.post(project.state, [Task(text="a", check="false"), Task(text="b", check="false")])
    asked = iter(range(100))
    script = [plans({"text": "T3", "status": "done", "check": "true"})]
    script += [Reply(tool_calls=[tool("list_dir")])] * 2

    def respond(body: dict[str, Any]) -> Reply:
        n = next(asked)
        if n == 1:
            tasks.post(project.state, [Task(text="c", check="false")])
        return script[n] if n < len(script) else Reply(text="waiting")

    ran = run_here(project, respond, supervisor={"max_total_turns": 3})
    assert ran.returncode == 0, ran.stderr
    assert "step 1: T3 is no operator's task" in told(ran.chat_requests()[1])
    assert checks(project) == []
    progress = fold(project.state / "journal.jsonl")[0].part(Progress)
    assert [i.standing for i in progress.items.values()] == ["not checked yet"] * 3
    said = json.loads((project.state / "status.json").read_text())["run"]["progress"]
    assert (said["passing"], said["total"], said["unchecked"]) == (0, 3, 3)


def test_a_session_end_checks_a_rotating_share_each_task_within_its_sessions(
    project: Project,
) -> None:
    """7 tasks, 3 checks a session end: each is checked within ceil(7 / 3) = 3 of them, those
    checked longest ago (never first) first; the agent's done step is checked at each."""
    tasks.post(project.state, [Task(text=f"t{n}", check="true") for n in range(1, 8)])
    own = {"text": "mine", "status": "done", "check": "true"}
    script = [plans(own), *[Reply(tool_calls=[tool("list_dir")]) for _ in range(6)]]
    ran = run_here(
        project,
        script,
        session={"max_turns": 1},
        progress={"session_end_checks": 3},
        supervisor={"max_total_turns": 5},
    )
    assert ran.returncode == 0, ran.stderr
    by_session: dict[int, list[str]] = {}
    for r in project.records("journal.jsonl"):
        if r["kind"] == "check" and r["when"] == "session_end":
            by_session.setdefault(r["session"], []).append(r["item"])
    assert by_session == {
        1: ["mine", "T1", "T2"],
        2: ["mine", "T3", "T4"],
        3: ["mine", "T5", "T6"],
        4: ["mine", "T7", "T1"],
    }


def test_checks_run_at_once_and_are_journalled_in_the_order_asked(project: Project) -> None:
    """Each of four checks passes only once all four have started (it waits for the others'
    marks): at `progress.checks_at_once` = 4 all pass, and the records keep the tasks' order
    though the first ends last."""
    all_in = "[ $(ls marks | wc -l) -ge 4 ]"
    wait = f"for i in $(seq 200); do {all_in} && break; sleep 0.05; done; {all_in}"
    found = [
        Task(text=f"t{n}", check=f"touch marks/{n}; {wait} && sleep 0.{(4 - n) * 2}")
        for n in range(1, 5)
    ]
    tasks.post(project.state, found)
    script = [shell("mkdir marks"), FINISH]
    ran = run_here(project, script, progress={**NO_WRITE_CHECKS, "checks_at_once": 4})
    assert ran.returncode == 0, ran.stderr
    assert checks(project) == [(f"T{n}", 0, "finish") for n in range(1, 5)]


def test_a_run_is_stopped_as_stalled_only_once_every_task_is_checked_as_it_stands(
    project: Project,
) -> None:
    """The share (one check) left T3 out, and T3 was met: the stall's stop runs it first, and
    the run goes on, to stop two sessions later with nothing newly passed."""
    found = [Task(text="never", check="false"), Task(text="x", check="false")]
    tasks.post(project.state, [*found, Task(text="later", check="test -f later.txt")])
    script = [shell("true"), shell("touch later.txt")]
    script += [Reply(tool_calls=[tool("list_dir")]) for _ in range(5)]
    ran = run_here(
        project,
        script,
        session={"max_turns": 1},
        progress={"stall_sessions": 1, "session_end_checks": 1},
        supervisor={"max_total_turns": 5},
    )
    assert ran.returncode == 0, ran.stderr
    passed = [(r["item"], r["session"]) for r in project.events("check") if r["passed"]]
    assert passed[0] == ("T3", 2), checks(project)
    assert project.events("run_end")[-1]["reason"] == "stalled"
    assert len(project.events("session_start")) == 4


def test_a_model_that_copies_the_note_that_every_task_passes_ends_the_run(
    project: Project,
) -> None:
    """The real small model copied "[... call finish if you are done]" into every reply after
    and never called it: the note shows the call, and copied, it ends the run."""
    tasks.post(project.state, [Task(text="write hello.txt", check="grep -q hello hello.txt")])

    def agent(body: dict[str, Any]) -> Reply:
        said = str(body["messages"][-1].get("content") or "")
        if "passes now" in said:
            return Reply(text=said.split("\n", 1)[1])  # the note, as the model wrote it back
        return shell("echo hello > hello.txt")

    ran = run_here(project, agent, supervisor={"max_total_turns": 5})
    assert ran.returncode == 0, ran.stderr
    assert project.events("run_end")[-1]["reason"] == "finish"
    assert len(ran.chat_requests()) == 2


def test_a_task_whose_check_passes_after_a_write_is_said_in_that_result(project: Project) -> None:
    """A small model that has done its task goes on writing unless told: the result of the call
    that made a task pass says so, and says when every task passes."""
    tasks.post(
        project.state,
        [
            Task(text="write hello.txt", check="grep -q hello hello.txt"),
            Task(text="write bye.txt", check="test -f bye.txt"),
        ],
    )
    script = [shell("echo hi > hello.txt"), shell("echo hello > hello.txt"), shell("touch bye.txt")]
    ran = run_here(project, [*script, FINISH])
    assert ran.returncode == 0, ran.stderr
    results = [
        r["message"]
        for r in project.records("journal.jsonl")
        if r["kind"] == "message" and r["message"].get("name") == "shell_exec"
    ]
    assert "passes now" not in results[0]["content"]
    assert results[1]["content"].endswith("[the check of T1 passes now; 1 task(s) still to pass]")
    assert results[2]["content"].endswith(
        "[the check of T2 passes now, and every task's does; if you are done:]\n"
        '{"name": "finish", "arguments": {}}'
    )
    assert [c for c in checks(project) if c[2] == "write"] == [
        ("T1", 1, "write"),
        ("T2", 1, "write"),
        ("T1", 0, "write"),
        ("T2", 1, "write"),
        ("T2", 0, "write"),
    ]


def test_no_check_runs_after_a_write_when_told_not_to(project: Project) -> None:
    tasks.post(project.state, [Task(text="write hello.txt", check="grep -q hello hello.txt")])
    script = [shell("echo hello > hello.txt"), FINISH]
    ran = run_here(project, script, progress={"checks_after_write": 0})
    assert ran.returncode == 0, ran.stderr
    assert [c[2] for c in checks(project)] == ["finish"]
