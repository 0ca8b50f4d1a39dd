"""The agent's plan, kept by the harness, in whole runs in this process: a saved plan opens every
later session whole, a bad one is refused in one line and changes nothing, the wind-down asks
for an update, and `status`, `tail` and the report show it (tests/test_plan_whole.py: it stays
whole in the view)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from ouroboros.cli import main
from ouroboros.context.plan import PlanItem, in_opening, plan_tokens, render
from ouroboros.model.scripted import Reply, tool
from ouroboros.state.journal import fold
from tests.conftest import Project
from tests.inprocess import Scripted, run_here
from tests.test_context_run import fill_workspace

PLAN = [
    {"text": "read the parser", "status": "done", "note": "src/parse.py, 300 lines"},
    {"text": "fix the off-by-one in tokens()", "status": "doing"},
    {"text": "run the tests", "status": "todo"},
]
SHOWN = render([PlanItem.model_validate(item) for item in PLAN])


def saves(items: list[dict[str, Any]] = PLAN) -> Reply:
    return Reply(text="Planning.", tool_calls=[tool("plan", items=items)])


def shell(n: int) -> Reply:
    return Reply(tool_calls=[tool("shell_exec", command=f"echo step {n}")])


def opening(request: dict[str, Any]) -> str:
    """The first user message of a request: the session's opening (the restart marker)."""
    return str(next(m["content"] for m in request["messages"] if m["role"] == "user"))


def test_a_saved_plan_opens_every_later_session_whole(project: Project) -> None:
    script = [saves(), *(shell(n) for n in range(7))]
    model = Scripted(script)
    result = run_here(project, model, session={"max_turns": 2}, supervisor={"max_total_turns": 8})
    assert result.returncode == 0, result.stderr
    requests = model.chat_requests()
    openings = [opening(r) for r in requests]
    firsts = [o for before, o in zip(["", *openings], openings, strict=False) if o != before]
    sessions = {opening(r).split(".")[0] for r in requests}
    assert sessions == {"Session 1 of a new run", "Session 2", "Session 3", "Session 4"}
    assert SHOWN not in opening(requests[0])  # nothing saved yet
    for request in requests[2:]:  # every request of every session after the save
        assert SHOWN in opening(request), opening(request)
    assert len(firsts) == 4  # each session's first request
    state, _ = fold(project.state / "journal.jsonl")
    assert [i.model_dump() for i in state.plan.items] == [
        {"note": "", "check": "", **item} for item in PLAN
    ]
    assert state.plan.changes == 1


BAD = {
    "a status it does not know": [{"text": "read", "status": "started"}],
    "too many items": [{"text": f"step {n}", "status": "todo"} for n in range(21)],
    "a text too long": [{"text": "x" * 121, "status": "todo"}],
    "a note with a line break": [{"text": "read", "status": "todo", "note": "a\nb"}],
    "two doing": [{"text": "a", "status": "doing"}, {"text": "b", "status": "doing"}],
    "no text": [{"text": "  ", "status": "todo"}],
    "over the size cap": [{"text": f"{n} " + "y" * 110, "status": "todo"} for n in range(20)],
}


def test_a_bad_plan_is_refused_in_one_line_saying_what_to_do_and_changes_nothing(
    project: Project,
) -> None:
    bad = [Reply(tool_calls=[tool("plan", items=items)]) for items in BAD.values()]
    not_json = Reply(tool_calls=[("plan", '{"items": [')])
    model = Scripted([saves(), *bad, not_json])
    total = len(BAD) + 2
    result = run_here(project, model, supervisor={"max_total_turns": total})
    assert result.returncode == 0, result.stderr
    records = project.records("journal.jsonl")
    messages = [r["message"] for r in records if r["kind"] == "message"]
    results = [m for m in messages if m["kind"] == "tool"]
    assert len(results) == total
    assert not results[0].get("error")
    for why, refused in zip([*BAD, "not JSON"], results[1:], strict=True):
        said = refused["content"]
        assert refused.get("error"), why
        assert said.startswith("error: "), (why, said)
        assert "\n" not in said, (why, said)
    said = {why: r["content"] for why, r in zip(BAD, results[1:], strict=False)}
    assert "'todo', 'doing' or 'done'" in said["a status it does not know"]
    assert "at most 20: merge steps" in said["too many items"]
    assert "at most 120: say it shorter" in said["a text too long"]
    assert "line break: one line each" in said["a note with a line break"]
    assert "at most one step is doing" in said["two doing"]
    assert "no text: say what the step is" in said["no text"]
    cap = plan_tokens(3636)  # the prompt budget of a 4,096-token window here
    assert f"at most {cap:,} here: shorten" in said["over the size cap"]
    checked = [text for why, text in said.items() if why != "a status it does not know"]
    assert all(text.endswith("Nothing was changed") for text in checked)
    # Only the first plan was kept: one record carries a plan, and the fold has it.
    assert [r["plan"] for r in records if r["kind"] == "message" and "plan" in r] == [
        [{"note": "", "check": "", **i} for i in PLAN]
    ]
    state, _ = fold(project.state / "journal.jsonl")
    assert render(state.plan.items) == SHOWN
    assert len(project.events("plan")) == 1


def test_the_size_cap_is_a_small_share_of_the_prompt_budget() -> None:
    assert plan_tokens(3636) == 181  # 5% of a 4K window's budget, in tokens
    assert plan_tokens(6759) == 337  # 8K
    assert plan_tokens(500) == 170  # the least, whatever the window
    assert plan_tokens(1_000_000) == 1400  # the most


def test_the_wind_down_asks_the_agent_to_update_its_plan(project: Project) -> None:
    fill_workspace(project)
    reads = (
        Reply(tool_calls=[tool("file_read", path=f"mod{i % 12}.py")]) for i in itertools.count()
    )
    result = run_here(
        project, Scripted([saves(), *itertools.islice(reads, 40)]), supervisor={"max_restarts": 1}
    )
    assert result.returncode == 0, result.stderr
    winds = [r for r in project.records("journal.jsonl") if r["kind"] == "wind_down"]
    assert winds, "the session wound down"
    assert all("update your plan with the plan tool" in w["message"]["content"] for w in winds)


def test_status_tail_and_the_report_show_the_plan(
    project: Project, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    changed = [{**PLAN[0]}, {**PLAN[1], "status": "done"}, {**PLAN[2], "status": "doing"}]
    script = [saves(), shell(1), saves(changed), shell(2)]
    result = run_here(project, Scripted(script), supervisor={"max_total_turns": 4})
    assert result.returncode == 0, result.stderr
    state = str(project.state)
    assert main(["status", "--state", state]) == 0
    status = capsys.readouterr().out
    assert "2 done, 1 doing (saved in session 1)" in status
    assert "3. [doing] run the tests" in status
    assert "1. [done] read the parser (src/parse.py, 300 lines)" in status
    assert main(["tail", "--state", state]) == 0
    tail = [line for line in capsys.readouterr().out.splitlines() if "plan saved" in line]
    assert [line[9:] for line in tail] == [
        "plan saved (change 1): 3 items, 1 done, 1 doing, 1 todo; doing: "
        "fix the off-by-one in tokens()",
        "plan saved (change 2): 3 items, 2 done, 1 doing; doing: run the tests",
    ]
    out = tmp_path / "report.html"
    assert main(["report", "--state", state, "--out", str(out)]) == 0
    page = out.read_text()
    assert "<li><b>doing</b> run the tests</li>" in page
    assert page.count("plan saved (change") == 2


def test_the_opening_shows_the_plan_under_its_header_and_nothing_without_one() -> None:
    items = [PlanItem.model_validate(item) for item in PLAN]
    assert in_opening([]) == ""
    shown = in_opening(items)
    assert shown.startswith("\n\nYour plan, as you last saved it with the plan tool")
    assert shown.endswith(SHOWN)
