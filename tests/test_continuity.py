"""Continuity through restarts: whole runs in process against a scripted model, with an agent
whose last step before each restart is one of the hard cases (a reply longer than the old
carry-over share, five parallel calls, a text-only reply, a big output cut for room), each of
whose results runs after the session's last request."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from ouroboros.context.tokens import Budget
from ouroboros.ground.messages import (
    MESSAGE_ADAPTER,
    AssistantMessage,
    Message,
    ToolMessage,
    UserMessage,
)
from ouroboros.model.scripted import Reply, Responder, tool
from tests.conftest import Project
from tests.inprocess import run_here
from tests.test_context_run import assert_wind_downs_in_place, fill_workspace

LONG_THOUGHT = "I have weighed the parser against the lexer and the cache, step by step. " * 40
MASKED = " result masked:"


class HardCaseAgent:
    """Reads modules as a routine. Told to wind down, it saves notes, then ends the session with
    the next hard case; after a restart it takes up the routine again."""

    def __init__(self) -> None:
        self.paths = itertools.cycle(f"mod{i}.py" for i in range(12))
        self.cases = itertools.cycle(["long", "parallel", "text", "big_output"])
        self.winding = False

    def __call__(self, body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "user" and "Save what matters" in str(last["content"]):
            self.winding = True
            return Reply(
                text="Saving.", tool_calls=[tool("file_write", path="NOTES.md", content="x")]
            )
        if self.winding:
            self.winding = False
            return self.hard_case(next(self.cases))
        return Reply(text="Reading on.", tool_calls=[tool("file_read", path=next(self.paths))])

    def hard_case(self, case: str) -> Reply:
        if case == "long":
            return Reply(text=LONG_THOUGHT, tool_calls=[tool("file_read", path=next(self.paths))])
        if case == "parallel":
            calls = [tool("file_read", path=next(self.paths)) for _ in range(5)]
            return Reply(text="Five at once.", tool_calls=list[tuple[str, Any]](calls))
        if case == "text":
            return Reply(text="Let me think about what I have read before going on.")
        log = 'for i in $(seq 1 300); do echo "compiling module_$i of the build: ok"; done'
        return Reply(text="The whole log.", tool_calls=[tool("shell_exec", command=log)])


def sessions(project: Project) -> dict[int, list[tuple[Message, bool]]]:
    """Each session's messages from the journal, each marked as a reply the model made."""
    result: dict[int, list[tuple[Message, bool]]] = {}
    for record in project.records("journal.jsonl"):
        if record["kind"] == "session_start":
            result[record["session"]] = [
                (MESSAGE_ADAPTER.validate_python(m), False) for m in record["messages"]
            ]
        elif record["kind"] == "message":
            message = MESSAGE_ADAPTER.validate_python(record["message"])
            result[record["session"]].append((message, "usage" in record))
    return result


def last_step(messages: list[tuple[Message, bool]]) -> list[Message]:
    start = max(i for i, (m, made) in enumerate(messages) if made)
    return [m for m, _ in messages[start:] if not isinstance(m, UserMessage)]


def first_request(requests: list[dict[str, Any]], session: int) -> dict[str, Any]:
    return next(
        b for b in requests if str(b["messages"][1]["content"]).startswith(f"Session {session}.")
    )


@pytest.mark.slow
def test_a_restart_never_loses_the_last_step(project: Project) -> None:
    fill_workspace(project, files=12, words=500)
    agent = HardCaseAgent()
    result = run_here(
        project,
        agent,
        window=6144,
        llm={"max_output_tokens": 1024},
        supervisor={"max_restarts": 4, "max_total_turns": 200},
        # It reads the same files over in every session: a loop, by design of this test.
        loops={"session_repeat_after": 0},
    )
    requests = result.chat_requests()
    assert result.returncode == 0, result.stderr
    by_session = sessions(project)
    assert len(by_session) == 5
    shown_whole_again = 0
    for number in range(2, 6):
        step = last_step(by_session[number - 1])
        sent = first_request(requests, number)["messages"]
        reply = step[0]
        assert isinstance(reply, AssistantMessage)
        wire_reply = next(
            m for m in sent if m["role"] == "assistant" and str(m["content"] or "") == reply.content
        )
        assert [c["id"] for c in wire_reply.get("tool_calls") or []] == [
            c.id for c in reply.tool_calls
        ]
        results = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
        for message in step[1:]:
            assert isinstance(message, ToolMessage)
            carried = results[message.tool_call_id]
            assert MASKED not in carried[:40], f"session {number}: the last step masked"
            if carried != message.content:
                # Five results at once need more than a fresh session has below its soft
                # line: cut the way the tool cap cuts, never dropped.
                head, tail = carried.split("\n[... ")[0], carried.rsplit("]\n", 1)[1]
                assert message.content.startswith(head)
                assert message.content.endswith(tail)
                assert len(step) > 2, f"session {number}: a lone result cut"
            elif message.room_bytes is not None:
                shown_whole_again += 1
    assert shown_whole_again, "no result cut for room came back whole: re-rendering untested"
    # Every wind-down got the replies it promised; no session ended without one.
    ends = [e for e in project.events("session_end") if e["reason"] == "context_full"]
    assert len(ends) == 5
    assert all(e["detail"] == "wind-down replies used" for e in ends)
    assert len(project.events("wind_down")) == 5
    assert assert_wind_downs_in_place(project, requests) == 5
    assert not project.events("wind_down_missed")
    # Every result reached the model unmasked at least once, but those of the run's last step.
    shown_ids = {
        m["tool_call_id"]
        for b in requests
        for m in b["messages"]
        if m["role"] == "tool" and MASKED not in str(m["content"])[:40]
    }
    produced = [
        m.tool_call_id
        for m, _ in itertools.chain(*by_session.values())
        if isinstance(m, ToolMessage)
    ]
    final = {m.tool_call_id for m in last_step(by_session[5]) if isinstance(m, ToolMessage)}
    assert set(produced) - final <= shown_ids


def test_five_unseen_results_are_never_masked_and_placeholders_say_what_was_there(
    project: Project,
) -> None:
    fill_workspace(project, files=12, words=500)
    paths = itertools.cycle(f"mod{i}.py" for i in range(12))
    replies = [Reply(tool_calls=[tool("file_read", path=next(paths))]) for _ in range(6)]
    replies.append(Reply(tool_calls=[tool("file_read", path=next(paths)) for _ in range(5)]))
    replies.append(Reply(text="Read them all."))
    result = run_here(
        project, replies, window=8192, supervisor={"max_total_turns": 8, "max_restarts": 0}
    )
    requests = result.chat_requests()
    assert result.returncode == 0, result.stderr
    after_five = requests[7]["messages"]
    five = [m for m in after_five if m["role"] == "tool"][-5:]
    assert all(MASKED not in str(m["content"]) for m in five), "an unseen result was masked"
    assert project.events("context_mask"), "the window was not under pressure: nothing to show"
    placeholders = [str(m["content"]) for m in after_five if MASKED in str(m["content"])]
    assert placeholders
    first = placeholders[0]
    assert first.startswith("[file_read result masked: mod0.py, 62 lines, 2,211 bytes,")
    assert 'first "def function_0_0(x): return x + 0"' in first
    assert 'last "def function_0_61(x): return x + 61"' in first
    assert first.endswith("read it again with file_read]")


@pytest.mark.slow
def test_a_shell_placeholder_names_the_command_and_where_its_output_is(
    project: Project,
) -> None:
    replies = [
        Reply(tool_calls=[tool("shell_exec", command=f"seq {n} {n + 700}; echo done {n}")])
        for n in range(20)
    ]
    # Digits are a token each: the cap in tokens (a quarter of the prompt budget) would cut
    # these outputs at 4K; at 16K the journal keeps them whole.
    result = run_here(
        project, replies, window=16384, supervisor={"max_total_turns": 20, "max_restarts": 0}
    )
    requests = result.chat_requests()
    assert result.returncode == 0, result.stderr
    placeholder = next(
        str(m["content"]) for b in requests for m in b["messages"] if MASKED in str(m["content"])
    )
    assert placeholder.startswith("[shell_exec result masked: `seq 0 700; echo done 0`, exit 0,")
    assert "703 lines, 2,713 bytes" in placeholder
    assert 'first "0", last "done 0"' in placeholder
    saved = placeholder.split("full text in ")[1].rstrip("]")
    text = (project.workspace / saved).read_text()
    assert text.startswith("exit code 0\n0\n1\n")
    assert text.endswith("done 0\n")
    journal = [
        json.loads(line) for line in (project.state / "journal.jsonl").read_text().splitlines()
    ]
    first_result = next(
        r["message"] for r in journal if r["kind"] == "message" and r["message"]["kind"] == "tool"
    )
    stored = MESSAGE_ADAPTER.validate_python(first_result)
    assert isinstance(stored, ToolMessage)
    assert stored.content == text, "the journal keeps the output whole (it is under the cap)"
    assert len(text.encode()) == stored.output_bytes


def restarts_of(project: Project, agent: Responder, restarts: int) -> list[dict[str, Any]]:
    """Run `agent` at an 8K window (1,024 output tokens) until `restarts` restarts happened;
    every session's end that restarts (or would have)."""
    result = run_here(
        project,
        agent,
        window=8192,
        llm={"max_output_tokens": 1024},
        supervisor={"max_restarts": restarts, "max_total_turns": 200},
    )
    assert result.returncode == 0, result.stderr
    return [e for e in project.events("session_end") if e["reason"] == "context_full"]


def test_a_wind_down_leaves_room_for_the_replies_this_run_makes(project: Project) -> None:
    # Every reply is long, as with an agent that thinks aloud: a fixed 10% below the budget does
    # not hold two of them; the line placed from the run's own replies does.
    fill_workspace(project, files=12, words=500)
    paths = itertools.cycle(f"mod{i}.py" for i in range(12))
    thought = "Weighing what this module does against the notes, one function at a time. " * 20

    def agent(body: dict[str, Any]) -> Reply:
        return Reply(text=thought, tool_calls=[tool("file_read", path=next(paths))])

    ends = restarts_of(project, agent, 3)
    assert [e["detail"] for e in ends] == ["wind-down replies used"] * 4
    assert not project.events("wind_down_missed")
    lines = [w["hard_line"] for w in project.events("wind_down")]
    budget = Budget.for_window(8192, 0.7, 0.9, 1024, 0.05)
    assert all(line < budget.hard_line for line in lines), lines


def test_one_reply_past_both_lines_is_logged_and_named_to_the_next_session(
    project: Project,
) -> None:
    # Results are cut to what the wind-down needs (tests/test_result_room.py): only a reply
    # longer than the whole room left can go past both lines, one too long to carry too.
    fill_workspace(project, files=12, words=500)
    paths = itertools.cycle(f"mod{i}.py" for i in range(12))
    thought = "A long look back over everything read so far, before reading twelve more. " * 200
    jumped = False

    def agent(body: dict[str, Any]) -> Reply:
        nonlocal jumped
        if not jumped and MASKED in json.dumps(body["messages"]):
            jumped = True
            return Reply(text=thought, tool_calls=[tool("file_read", path=next(paths))] * 12)
        return Reply(text="Reading on.", tool_calls=[tool("file_read", path=next(paths))])

    result = run_here(
        project,
        agent,
        window=6144,
        llm={"max_output_tokens": 1024},
        supervisor={"max_restarts": 1, "max_total_turns": 200},
    )
    requests = result.chat_requests()
    assert result.returncode == 0, result.stderr
    missed = project.events("wind_down_missed")
    assert len(missed) == 1
    assert missed[0]["projected"] > missed[0]["prompt_budget"] > missed[0]["hard_line"]
    end = project.events("session_end")[0]
    assert end["detail"].startswith("next prompt ~")
    # No wind-down message in session 1 (the step went past the budget at once); session 2 winds
    # down in its place, and ends for it.
    assert {w["session"] for w in project.events("wind_down")} == {2}
    assert assert_wind_downs_in_place(project, requests) == 1
    # Its results were cut to their markers; the step is too big for a fresh session even so,
    # and the next one opens naming its calls.
    marker = first_request(requests, 2)["messages"][1]["content"]
    assert "Nothing was carried over." in marker
    assert marker.count("file_read mod") == 5


def test_a_wind_down_makes_room_when_the_line_moved_under_the_session(project: Project) -> None:
    # Short replies first, long ones later: the line placed from the early replies moves up
    # once the long ones are seen, under a session already past it. The promise still holds:
    # results the model has seen give way where the replies need it (`room_for_replies`).
    fill_workspace(project, files=12, words=700)
    paths = itertools.cycle(f"mod{i}.py" for i in range(12))
    calls = itertools.count()
    long = "Going over every function again, slowly, to be sure of each detail. " * 55

    def agent(body: dict[str, Any]) -> Reply:
        thought = "Reading on." if next(calls) < 9 else long
        return Reply(text=thought, tool_calls=[tool("file_read", path=next(paths))])

    ends = restarts_of(project, agent, 2)
    assert [e["detail"] for e in ends] == ["wind-down replies used"] * 3
    assert not project.events("wind_down_missed")
