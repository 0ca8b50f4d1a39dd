"""Dead ends (issue 33): a call that failed is remembered across restarts and resumes, listed in
each new session's opening within its share of the prompt budget, named in the result of the
same call failing the same way again, and forgotten once it succeeds."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from ouroboros.context.mask import placeholder, saved_path
from ouroboros.context.tokens import text_kind
from ouroboros.deadends.recall import noted
from ouroboros.deadends.records import MAX_KEPT, DeadEndMet, DeadEnds, canonical, signature
from ouroboros.ground import prompts
from ouroboros.ground.config_file import load_settings
from ouroboros.ground.messages import ToolMessage
from ouroboros.model.scripted import Reply, tool
from ouroboros.observe.describe import describe
from ouroboros.observe.status import read_status, render_status
from ouroboros.state.fold import RunState, replay
from ouroboros.state.journal import fold
from ouroboros.state.records import JOURNAL_RECORD, MessageRecord, SessionStart, ToolRun
from ouroboros.state.snapshot import snapshot_path
from ouroboros.tools import ToolCaps, ToolRunner
from ouroboros.tools.workspace import Workspace
from tests.conftest import Project
from tests.inprocess import Scripted, run_here

NOT_READY = "test -f ready || { echo 'not ready: run make first'; exit 3; }"
LISTED = "Calls that failed before"
NOTE = "[dead end: this exact call failed this way"


def result(
    command: str = "make",
    exit_code: int | None = 2,
    output: str = "make: *** No rule to make target 'all'.",
    error: bool = False,
    name: str = "shell_exec",
    arguments: str | None = None,
) -> ToolMessage:
    content = f"exit code {exit_code}\n{output}" if exit_code is not None else f"error: {output}"
    return ToolMessage(
        tool_call_id="c1",
        name=name,
        content=content,
        output_bytes=len(content.encode()),  # whole, as the runner says of an uncut output
        output_lines=len(content.splitlines()),
        exit_code=exit_code,
        error=error,
        arguments=json.dumps({"command": command}) if arguments is None else arguments,
    )


def folded(*results: ToolMessage, session: int = 1, ran: bool = True) -> DeadEnds:
    state = RunState()
    state.apply(SessionStart(session=session, reason="fresh", messages=[]))
    for message in results:
        tool = ToolRun(duration_s=0.1, output_bytes=10) if ran else None
        state.apply(MessageRecord(session=session, message=message, tool=tool))
    return state.part(DeadEnds)


def only(ends: DeadEnds) -> Any:
    [end] = ends.ends.values()
    return end


# --- The part: what is remembered, from the results the run journals.


def test_a_failed_call_is_remembered_by_its_status_and_last_line() -> None:
    end = only(folded(result()))
    assert end.call == "shell_exec `make`"
    assert end.failure == "exit 2, \"make: *** No rule to make target 'all'.\""
    assert (end.times, end.session) == (1, 1)


def test_the_same_failure_again_counts_and_another_starts_over() -> None:
    assert only(folded(result(), result())).times == 2
    other = only(folded(result(), result(), result(exit_code=1, output="make: Error 1")))
    assert (other.times, other.failure) == (1, 'exit 1, "make: Error 1"')


def test_a_success_clears_it_and_only_its_own_call() -> None:
    ends = folded(result(), result("ls", 1, "nope"), result(exit_code=0, output="built"))
    assert [e.call for e in ends.ends.values()] == ["shell_exec `ls`"]


def test_a_tool_error_is_a_dead_end_too() -> None:
    read = result(exit_code=None, output="no such file: a.txt", error=True, name="file_read",
                  arguments='{"path": "a.txt"}')  # fmt: skip
    assert only(folded(read)).failure == 'error, "error: no such file: a.txt"'


def test_a_call_the_harness_died_in_is_not_the_calls_failure() -> None:
    interrupted = result(exit_code=None, output=prompts.CRASH_INTERRUPTED, error=True)
    assert folded(interrupted, ran=False).ends == {}


def test_the_same_arguments_in_another_order_are_the_same_call() -> None:
    a = result(arguments='{"command": "make", "timeout_s": 5}')
    b = result(arguments='{"timeout_s":5,"command":"make"}')
    assert only(folded(a, b)).times == 2
    assert canonical("not json {") == "not json {"


def test_arguments_nested_as_deep_as_json_is_read_are_still_one_call() -> None:
    """The agent's arguments, however deep (the reader refuses past a depth): a call is
    remembered as sent, never a fold that raises."""
    for depth in range(900, 1010, 3):
        deep = '{"command":' * depth + '"x"' + "}" * depth
        assert only(folded(result(arguments=deep), result(arguments=deep))).times == 2
    assert only(folded(result(arguments="[1, 2]"))).call == "shell_exec [1,2]"


def test_a_timing_in_the_last_line_does_not_make_another_failure() -> None:
    first = result("pytest", 1, "=== 1 failed, 88 passed in 3.10s ===")
    again = result("pytest", 1, "=== 1 failed, 88 passed in 2.97s ===")
    fewer = result("pytest", 1, "=== 2 failed, 87 passed in 2.97s ===")
    assert signature(first) == signature(again) != signature(fewer)


def test_the_note_of_a_repeat_is_not_its_last_line() -> None:
    # A tool that failed saying nothing (an MCP server's can): the note would be its only line.
    bare = result(exit_code=None, error=True).model_copy(update={"content": ""})
    noted = bare.model_copy(update={"content": prompts.dead_end_note(1, 1, 2) + bare.content})
    assert signature(noted) == signature(bare)


def test_the_oldest_is_forgotten_past_the_most_kept() -> None:
    ends = folded(*(result(f"make t{n}") for n in range(MAX_KEPT + 1)))
    assert len(ends.ends) == MAX_KEPT
    assert "shell_exec `make t0`" not in [e.call for e in ends.ends.values()]


def test_the_opening_lists_the_newest_first_within_its_budget() -> None:
    ends = folded(*(result(f"make t{n}") for n in range(5)), result("make t0"))

    def size(text: str) -> int:
        return len(text)

    listed = ends.listing(size, 10_000)
    assert listed.startswith(prompts.DEAD_ENDS)
    calls = [line.split(":")[0] for line in listed.splitlines()[3:]]
    assert calls == ["- shell_exec `make t0`", *(f"- shell_exec `make t{n}`" for n in (4, 3, 2, 1))]
    assert "(session 1, twice)" in listed
    short = ends.listing(size, len(prompts.DEAD_ENDS) + 100)
    assert len(short) <= len(prompts.DEAD_ENDS) + 100
    assert short.count("\n- ") == 1
    assert ends.listing(size, 10) == ""


def test_a_repeat_met_is_counted_for_status() -> None:
    state = RunState()
    met = DeadEndMet(session=2, call_id="c", call="x", failure="exit 1", times=1, last_session=1)
    state.apply(met)
    assert state.part(DeadEnds).status()["dead_ends"]["met"] == 1


# --- A whole run: listed in the next opening, a repeat noted, resumed, cleared.


def script() -> list[Reply]:
    return [
        Reply(tool_calls=[tool("shell_exec", command=NOT_READY)]),  # session 1: fails
        Reply(tool_calls=[tool("shell_exec", command="echo other work")]),
        Reply(tool_calls=[tool("shell_exec", command=NOT_READY)]),  # session 2: the same again
        Reply(tool_calls=[tool("shell_exec", command="touch ready")]),
        Reply(tool_calls=[tool("shell_exec", command=NOT_READY)]),  # session 3: succeeds
        Reply(tool_calls=[tool("finish", summary="done")]),
    ]


def session_openings(ran: Any) -> dict[int, str]:
    """Each session's first message after the system prompt, as its first request sent it."""
    found: dict[int, str] = {}
    for body in ran.chat_requests():
        first = str(body["messages"][1]["content"])
        if first.startswith("Session "):
            found.setdefault(int(first.split()[1].rstrip(".")), first)
    return found


def status_text(project: Project) -> str:
    out = io.StringIO()
    settings = load_settings(project.root / "config.toml")
    Console(file=out, width=200).print(render_status(read_status(project.state), lambda: settings))
    return out.getvalue()


def test_a_call_that_failed_in_session_1_is_listed_in_session_2_and_its_repeat_says_so(
    project: Project,
) -> None:
    ran = run_here(project, script(), session={"max_turns": 2})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    openings = session_openings(ran)
    assert LISTED not in openings[1]
    listed = openings[2][openings[2].index(LISTED) :]
    assert 'exit 3, "not ready: run make first" (session 1)' in listed
    assert "shell_exec `test -f ready" in listed
    assert len(listed) < 200, listed  # one short line: every request of the session pays it
    # The repeat in session 2: its result says when and how often it failed so before.
    repeat = ran.chat_requests()[3]["messages"][-1]
    assert repeat["role"] == "tool"
    assert repeat["content"].startswith(f"{NOTE} once before, last in session 1;")
    assert "not ready: run make first" in repeat["content"]
    [met] = project.events("dead_end")
    assert (met["times"], met["last_session"], met["session"]) == (1, 1, 2)
    line = describe(met)
    assert line is not None
    assert "dead end met again: shell_exec `test -f ready" in line.plain
    assert "(session 2, twice)" in openings[3]
    # Session 3's succeeded: nothing is remembered, the run ends.
    after = [m["content"] for m in ran.chat_requests()[-1]["messages"] if m["role"] == "tool"]
    assert after[-1].startswith("exit code 0")
    assert "0 remembered, 1 met again" in status_text(project)


@pytest.mark.parametrize("keep_snapshot", [True, False])
def test_a_resumed_run_remembers_them(project: Project, keep_snapshot: bool) -> None:
    """Stopped at its turn limit in session 2, resumed (from its snapshot, or folding the
    whole journal): the next session's opening lists what the first two failed."""
    model = Scripted(script())
    run_here(project, model, session={"max_turns": 2}, supervisor={"max_total_turns": 3})
    shown = status_text(project)
    assert "dead ends" in shown
    assert "1 remembered, 1 met again" in shown
    assert 'exit 3, "not ready: run make first" (session 2, twice)' in shown
    journal = project.state / "journal.jsonl"
    if not keep_snapshot:
        snapshot_path(journal).unlink()
    resumed = run_here(project, model, session={"max_turns": 2})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "(session 2, twice)" in session_openings(resumed)[3]
    records = [JOURNAL_RECORD.validate_json(line) for line in journal.read_bytes().splitlines()]
    assert replay(records).part(DeadEnds) == fold(journal)[0].part(DeadEnds)


def test_the_list_takes_its_room_from_the_carry_over(tmp_path: Path) -> None:
    """The opening's list is counted with the plan, as fixed: a new session that lists more
    carries fewer of the steps before the last, and starts as far below its soft line."""
    noisy = [f"echo {'word ' * 30}{n}; exit 1" for n in range(8)]
    replies = [Reply(tool_calls=[tool("shell_exec", command=c)]) for c in noisy]
    finish = Reply(tool_calls=[tool("finish", summary="done")])
    carried = []
    for share in (0, 0.2):
        project = Project(tmp_path / str(share))
        project.workspace.mkdir(parents=True)
        (project.root / "SYSTEM_PROMPT.md").write_text("# Purpose\nTest the harness.\n")
        run_here(project, [*replies, finish], session={"max_turns": 8}, dead_ends={"share": share})
        [restart] = project.events("session_restart")
        carried.append(restart["carried_messages"])
    assert carried[1] < carried[0], carried


def test_the_share_0_lists_none_and_still_notes_a_repeat(project: Project) -> None:
    ran = run_here(project, script(), session={"max_turns": 2}, dead_ends={"share": 0})
    assert LISTED not in session_openings(ran)[2]
    assert ran.chat_requests()[3]["messages"][-1]["content"].startswith(NOTE)


A, B, C = "echo a; exit 1", "echo b; exit 1", "echo c; exit 1"
"""Calls that fail, each its own way."""


@pytest.mark.parametrize(
    ("calls", "turns", "loop", "notes"),
    [
        ([A] * 3, 5, "repeat", 2),
        ([A, "echo ok"] * 3, 7, "cycle", 2),
        ([A, B, A, C, A], 5, "failing", 2),
        ([f"echo {n}; exit 1" for n in range(5)] * 2, 5, "session_repeat", 5),
        # Session 2 noted (not session 1's order), session 3 the same as session 2: caught.
        ([A, B, C, *[B, A, C] * 2], 3, "session_repeat", 6),
    ],
)
def test_the_loops_see_noted_repeats_as_the_same_results(
    project: Project, calls: list[str], turns: int, loop: str, notes: int
) -> None:
    """The note counts the times, so no two are alike: the loops compare the results without
    it, and each is caught where it would be without notes."""
    replies = [Reply(tool_calls=[tool("shell_exec", command=c)]) for c in calls]
    ran = run_here(
        project,
        [*replies, Reply(tool_calls=[tool("finish", summary="done")])],
        session={"max_turns": turns},
        loops={"session_repeat_after": min(turns, 5)},
    )
    assert ran.returncode == 0
    assert [e["loop"] for e in project.events("loop")] == [loop]
    assert len(project.events("dead_end")) == notes


# --- The note: a harness line before the output, as the other readers of a result take it.


def test_a_noted_whole_result_is_saved_whole_where_its_placeholder_says(tmp_path: Path) -> None:
    noted_result = noted(result(), prompts.dead_end_note(1, 1, 2))
    workspace = Workspace(tmp_path, tmp_path / "SYSTEM_PROMPT.md")
    anyio.run(ToolRunner(workspace, [], ToolCaps(4000)).save_whole, [noted_result])
    saved = tmp_path / saved_path(noted_result)
    assert saved.read_text() == noted_result.content
    said = placeholder(noted_result)
    assert 'first "make: *** No rule' in said, said  # the output's line, not the note


def test_a_noted_result_is_priced_as_its_output() -> None:
    short_json = '{"ok": 1}'
    assert text_kind(prompts.dead_end_note(3, 1, 2) + short_json) == text_kind(short_json)
    assert text_kind(short_json) == "markup"
