"""Nothing a server sends crashes, hangs or misleads the run (issue 20, rows 11, 12, 14, 15, 16).

The client against the loopback server where the promise is the client's (a malformed chunk, a
trickle, a flood); a whole run in process where it is the session's (reused call ids, a reply
of thousands of calls), the real CLI where the run is killed or the wire matters (absurd usage).
Every case: a normal end or a one-line error, never a traceback."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Any

import anyio
import pytest

from ouroboros.context.ledger import Counting, Ledger
from ouroboros.ground import prompts
from ouroboros.ground.config import LLMSettings
from ouroboros.ground.messages import Message, SystemMessage, UserMessage
from ouroboros.model.llm import Completion, LLMClient, TransientError
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.model.scripted_hostile import call, chunk, events, flood, one_line, trickle, usage
from ouroboros.state.records import EndReason, MessageRecord, SessionEnd, SessionStart
from tests.conftest import Project, wait_for
from tests.inprocess import Ran, Scripted, run_here

MESSAGES: list[Message] = [SystemMessage(content="sys"), UserMessage(content="hello")]


def complete(reply: Reply, **settings: Any) -> Completion:
    """One completion of `reply` through the real client and the loopback server."""

    async def go(url: str) -> Completion:
        client = LLMClient(LLMSettings(base_url=url, model="scripted", **settings))
        try:
            return await client.complete(MESSAGES, [])
        finally:
            await client.aclose()

    with ScriptedServer([reply]) as server:
        return anyio.run(go, server.url)


def journal(project: Project) -> list[dict[str, Any]]:
    return project.records("journal.jsonl")


def replies(project: Project) -> list[dict[str, Any]]:
    return [
        r
        for r in journal(project)
        if r["kind"] == "message" and r["message"]["kind"] == "assistant" and "usage" in r
    ]


def clean(result: subprocess.CompletedProcess[str] | Ran) -> None:
    """A run that ended on its own terms: exit 0 and no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr


def killed_once_started(project: Project, *args: str) -> None:
    """`run ARGS`, killed with SIGKILL once a command of its has touched `started`."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ouroboros", "run", *args],
        cwd=project.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for((project.workspace / "started").exists, timeout=60)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


# --- row 15: malformed stream data -------------------------------------------------------------

FINISH = chunk(finish="stop")


@pytest.mark.parametrize(
    ("stream", "check"),
    [
        pytest.param(
            events(chunk({"content": "ok"}), chunk({}, "tool_calls")),
            lambda c: c.message.content == "ok",
            id="plain",
        ),
        pytest.param(
            events(chunk(call(None, "c1", "list_dir", '{"path": "."}')), chunk({}, "tool_calls")),
            lambda c: (
                [(t.name, t.arguments) for t in c.message.tool_calls]
                == [("list_dir", '{"path": "."}')]
            ),
            id="index-null",
        ),
        pytest.param(
            events(
                chunk(call(None, "c1", "file_read", '{"pa')),
                chunk(call(None, None, None, 'th": "a"}')),
                chunk({}, "tool_calls"),
            ),
            lambda c: [t.arguments for t in c.message.tool_calls] == ['{"path": "a"}'],
            id="index-null-fragments-join-the-last-call",
        ),
        pytest.param(
            events(
                chunk(call(1, "c1", "list_dir", '{"path": "."}')),
                chunk(call(None, "c2", "list_dir", '{"path": "b"}')),
                chunk({}, "tool_calls"),
            ),
            lambda c: [t.id for t in c.message.tool_calls] == ["c1", "c2"],
            id="index-null-beside-an-index",
        ),
        pytest.param(
            events(chunk(call(0, "c1", "list_dir", {"path": "."})), chunk({}, "tool_calls")),
            lambda c: json.loads(c.message.tool_calls[0].arguments) == {"path": "."},
            id="arguments-as-an-object",
        ),
        pytest.param(
            events(chunk(call("0", 7, ["x"], 12)), chunk({}, "tool_calls")),
            lambda c: c.message.tool_calls[0].arguments == "12",
            id="every-call-field-the-wrong-type",
        ),
        pytest.param(
            events(
                {"choices": "x"},
                {"choices": 5},
                {"choices": [5, {"delta": 5}, {"delta": {"content": 7, "tool_calls": {}}}]},
                {"choices": [{"delta": {"content": "a"}, "finish_reason": 3}]},
                5,
                [],
                json.dumps("a string"),
                {"usage": [], "timings": "t"},
                FINISH,
            ),
            lambda c: c.message.content == "a" and c.finish_reason == "stop",
            id="wrong-types-anywhere-in-a-chunk",
        ),
        pytest.param(
            events(FINISH, usage(prompt_tokens="abc", completion_tokens=3)),
            lambda c: c.usage is None and c.rejected and c.rejected.kind == "not_a_count",
            id="prompt-tokens-a-string",
        ),
        pytest.param(
            events(FINISH, usage(prompt_tokens=1e308, completion_tokens=3)),
            lambda c: c.usage is None and c.rejected,
            id="prompt-tokens-1e308",
        ),
        pytest.param(
            events(FINISH, usage(prompt_tokens=1.5, completion_tokens=3)),
            lambda c: c.usage is None and c.rejected,
            id="prompt-tokens-1.5",
        ),
        pytest.param(
            events(FINISH, usage(prompt_tokens=float("nan"), completion_tokens=3)),
            lambda c: c.usage is None and c.rejected,
            id="prompt-tokens-nan",
        ),
        pytest.param(
            events(FINISH, usage(prompt_tokens=True, completion_tokens=3)),
            lambda c: c.usage is None and c.rejected,
            id="prompt-tokens-a-bool",
        ),
        pytest.param(
            events(FINISH, usage(prompt_tokens=-5000, completion_tokens=3)),
            lambda c: c.usage is None and c.rejected,
            id="prompt-tokens-negative",
        ),
        pytest.param(
            events(
                FINISH,
                usage(
                    prompt_tokens=40, completion_tokens=None, prompt_tokens_details={"cached": 1}
                ),
            ),
            lambda c: (
                c.usage is not None
                and (c.usage.prompt_tokens, c.usage.completion_tokens) == (40, 0)
            ),
            id="usage-fields-missing-or-null",
        ),
        pytest.param(
            events(
                chunk(finish="stop", timings={"cache_n": None, "prompt_n": 30, "predicted_n": 4})
            ),
            lambda c: c.usage is not None and c.usage.prompt_tokens == 30,
            id="timings-cache-n-null",
        ),
        pytest.param(
            events(chunk(finish="stop", timings={"prompt_n": "x", "prompt_ms": float("inf")})),
            lambda c: c.usage is None and c.rejected,
            id="timings-not-counts",
        ),
    ],
)
@pytest.mark.slow
def test_a_malformed_chunk_never_raises(stream: Any, check: Any) -> None:
    completion = complete(Reply(wire=stream))
    assert check(completion)


@pytest.mark.parametrize(
    "stream",
    [
        pytest.param(events(chunk({"content": "half"}), "{not json"), id="not-json"),
        pytest.param(events(chunk({"content": "half"}), done=False), id="no-finish"),
    ],
)
def test_a_stream_that_is_no_reply_is_a_transient_one_line_error(stream: Any) -> None:
    with pytest.raises(TransientError) as caught:
        complete(Reply(wire=stream))
    assert "\n" not in str(caught.value)


@pytest.mark.slow
def test_malformed_chunks_in_a_run_are_retried_and_the_run_goes_on(project: Project) -> None:
    hostile = iter(
        [
            Reply(wire=events("{not json")),
            Reply(wire=events(chunk(call(None, None, "list_dir", {"path": "."})))),
            Reply(
                wire=events(
                    chunk(call(None, "x", "list_dir", {"path": "."})),
                    chunk(finish="tool_calls", timings={"cache_n": None, "prompt_n": 9}),
                    usage(prompt_tokens="abc", completion_tokens=1.5),
                )
            ),
        ]
    )
    with ScriptedServer(lambda body: next(hostile, Reply(text="fine"))) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "2")
    clean(result)
    assert [e["name"] for e in project.events("tool_call")] == ["list_dir"]
    assert len(project.events("retry")) == 2
    # The usage chunk is no count: llama-server's timings stand in for it.
    assert [u["source"] for u in project.usage()] == ["timings", "server"]


@pytest.mark.slow
def test_a_server_that_always_sends_garbage_ends_the_run_in_one_line(project: Project) -> None:
    with ScriptedServer(lambda body: Reply(wire=events("{not json"))) as server:
        project.configure(server.url, llm={"retry_for_s": 1})
        result = project.run("run", "--max-turns", "2")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "malformed stream" in lines[0]
    assert journal(project)[-1]["kind"] == "run_end"


# --- row 14: an overall deadline and a byte cap ------------------------------------------------


@pytest.mark.slow
def test_a_trickle_of_empty_chunks_ends_at_the_deadline() -> None:
    # The trickle goes on for a minute and then ends well: only the idle deadline, cutting it
    # short, makes this error.
    with pytest.raises(TransientError) as caught:
        complete(Reply(wire=trickle(60, every=0.2)), timeout_s=1)
    assert "llm.timeout_s" in str(caught.value)


@pytest.mark.slow
def test_a_slow_reply_that_moves_on_is_not_cut_by_the_idle_timeout() -> None:
    """A slow machine's reply (a token every quarter second) takes longer than `timeout_s`
    in all, and is whole: only a reply that stops moving is cut."""
    completion = complete(Reply(wire=trickle(2.5, every=0.25, text="a")), timeout_s=1)
    assert completion.finish_reason == "stop"
    assert completion.message.content == "a" * len(completion.message.content)
    assert len(completion.message.content) >= 5


@pytest.mark.slow
def test_a_reply_that_trickles_text_forever_ends_at_the_whole_reply_deadline() -> None:
    with pytest.raises(TransientError) as caught:
        complete(Reply(wire=trickle(60, every=0.1, text="a")), timeout_s=10, reply_timeout_s=1)
    assert "llm.reply_timeout_s" in str(caught.value)


@pytest.mark.parametrize(
    "stream",
    [
        pytest.param(flood(64 << 20), id="content-deltas"),
        pytest.param(one_line(64 << 20), id="one-endless-line"),
    ],
)
def test_a_flood_is_cut_at_the_byte_cap_as_a_reply_cut_by_length(stream: Any) -> None:
    completion = complete(Reply(wire=stream), max_reply_bytes=1 << 20)
    assert completion.finish_reason == "length"
    assert len(completion.message.content) < 1 << 20
    assert completion.usage is None


# --- row 16: absurd usage ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply(text="working", prompt_tokens=-5000), id="negative"),
        pytest.param(Reply(text="working", prompt_tokens=10**15), id="above-the-window"),
        pytest.param(
            Reply(wire=events(FINISH, usage(prompt_tokens=1e15, completion_tokens=2))),
            id="a-float",
        ),
    ],
)
@pytest.mark.slow
def test_absurd_usage_is_ignored_with_one_warning(project: Project, reply: Reply) -> None:
    with ScriptedServer(lambda body: reply) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "4")
    clean(result)
    usage_rows = project.usage()
    assert [u["source"] for u in usage_rows] == ["estimate"] * 4
    assert all(0 < u["prompt_tokens"] < 10_000 for u in usage_rows)
    assert not project.events("silent_truncation")
    warnings = [w for w in project.events("warning") if "cannot be true" in w["message"]]
    assert len(warnings) == 1
    assert [r["kind"] for r in journal(project)].count("session_start") == 1, "no restarts"


def test_the_ledger_does_not_believe_a_prompt_larger_than_the_window() -> None:
    figures = Ledger().figures({"user": 3000}, 10, (10**15, 5, "server"), Counting(8192))
    assert figures.source == "estimate"
    assert not figures.silent_truncation
    assert figures.prompt_tokens < 8192


# --- row 11: reused tool-call ids --------------------------------------------------------------


def test_a_server_reusing_call_ids_gets_every_call_run_once(project: Project) -> None:
    requests = itertools.count()

    def agent(body: dict[str, Any]) -> Reply:
        n = next(requests)
        if n == 5:
            return Reply(tool_calls=[tool("finish", summary="done")], call_ids=("call_0",))
        calls = [tool("shell_exec", command=f"echo call-{n}-{i} >> runs.log") for i in range(2)]
        return Reply(tool_calls=list(calls), call_ids=("call_0", "call_0"))

    clean(run_here(project, agent, supervisor={"max_total_turns": 10}))
    lines = (project.workspace / "runs.log").read_text().splitlines()
    assert sorted(lines) == sorted(f"call-{n}-{i}" for n in range(5) for i in range(2))
    records = journal(project)
    assert records[-1]["kind"] == "run_end"
    assert records[-1]["reason"] == "finish"
    ids = [c["id"] for r in replies(project) for c in r["message"]["tool_calls"]]
    assert len(ids) == len(set(ids)) == 11
    renamed = {new: old for r in replies(project) for new, old in r["renamed_calls"].items()}
    assert set(renamed.values()) == {"call_0"}
    assert len(renamed) == 10, "the first call_0 keeps its id"
    assert not any(
        r["message"].get("content") == prompts.CRASH_INTERRUPTED
        for r in records
        if r["kind"] == "message"
    )


@pytest.mark.slow
def test_reused_call_ids_resume_after_kill_nine_without_running_a_call_twice(
    project: Project,
) -> None:
    requests = itertools.count()

    def agent(body: dict[str, Any]) -> Reply:
        n = next(requests)
        command = f"echo call-{n} >> runs.log"
        if n == 2:
            command += "; touch started; sleep 30"
        if n == 5:
            return Reply(tool_calls=[tool("finish", summary="done")], call_ids=("call_0",))
        return Reply(tool_calls=[tool("shell_exec", command=command)], call_ids=("call_0",))

    with ScriptedServer(agent) as server:
        project.configure(server.url)
        killed_once_started(project)
        result = project.run("run")
    clean(result)
    lines = (project.workspace / "runs.log").read_text().splitlines()
    assert lines == [f"call-{n}" for n in range(5)], "every call once, the killed one too"
    records = journal(project)
    assert records[-1]["reason"] == "finish"
    interrupted = [
        r
        for r in records
        if r["kind"] == "message" and r["message"].get("content") == prompts.CRASH_INTERRUPTED
    ]
    assert len(interrupted) == 1
    ids = [c["id"] for r in replies(project) for c in r["message"]["tool_calls"]]
    assert len(ids) == len(set(ids)) == 6


# --- row 12: a reply of thousands of calls, arguments too long ---------------------------------


def test_a_reply_of_five_thousand_calls_runs_the_cap_and_the_run_goes_on(project: Project) -> None:
    flood_of_calls = Reply(tool_calls=[tool("list_dir", path=".")] * 5000)
    model = Scripted([flood_of_calls])
    clean(run_here(project, model, supervisor={"max_total_turns": 2}))
    clean(run_here(project, model, supervisor={"max_total_turns": 4}))
    assert len(project.events("tool_call")) == 32
    reply = replies(project)[0]
    assert len(reply["message"]["tool_calls"]) == 32
    assert reply["dropped_calls"] == 4968
    told = [
        r["message"]["content"]
        for r in journal(project)
        if r["kind"] == "message" and r["message"].get("origin") == "nudge"
    ]
    assert any("4,968 were dropped" in text for text in told)
    assert (project.state / "journal.jsonl").stat().st_size < 200_000


@pytest.mark.slow
def test_a_last_step_that_cannot_fit_is_left_out_and_the_next_session_starts(
    project: Project,
) -> None:
    calls = Reply(tool_calls=[tool("list_dir", path=".")] * 1500)
    calls_cap, turns = {"max_tool_calls_per_reply": 5000}, {"max_total_turns": 3}
    clean(run_here(project, [calls], window=8192, llm=calls_cap, supervisor=turns))
    starts = [r for r in journal(project) if r["kind"] == "session_start"]
    assert len(starts) == 2
    assert starts[1]["carried"] == 0
    assert len(replies(project)) == 3


@pytest.mark.slow
def test_arguments_over_the_cap_are_not_run_nor_stored_twice(project: Project) -> None:
    big = tool("file_write", path="big.txt", content="x" * (2 << 20))
    with ScriptedServer([Reply(tool_calls=[big])]) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "2")
        sent_back = server.chat_requests()[1]["messages"]
    clean(result)
    assert not (project.workspace / "big.txt").exists()
    assert (project.state / "journal.jsonl").stat().st_size < 100_000
    assert len(json.dumps(sent_back)) < 100_000
    results = [
        r["message"]
        for r in journal(project)
        if r["kind"] == "message" and r["message"]["kind"] == "tool"
    ]
    assert results[0]["error"]
    assert "llm.max_tool_argument_bytes" in results[0]["content"]
    assert "were 2,097,1" in results[0]["content"]


@pytest.mark.slow
def test_an_absurd_count_of_a_refused_prompt_is_not_learnt(project: Project) -> None:
    requests = itertools.count()
    refusal = {
        "code": 400,
        "type": "exceed_context_size_error",
        "message": "request (1000000000000000 tokens) exceeds the available context size",
        "n_prompt_tokens": 10**15,
        "n_ctx": 8192,
    }

    def server_lying_once(body: dict[str, Any]) -> Reply:
        if next(requests) == 2:
            return Reply(status=400, error_body=refusal)
        return Reply(tool_calls=[tool("list_dir", path=".")])

    with ScriptedServer(server_lying_once, dialect="llama", n_ctx=8192) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "5")
    clean(result)
    assert not [r for r in journal(project) if r["kind"] == "refused"]
    assert [w for w in project.events("warning") if "1,000,000,000,000,000" in w["message"]]
    assert all(u["estimated_prompt_tokens"] < 8192 for u in project.usage())


@pytest.mark.slow
def test_call_ids_stay_unique_across_sessions_and_resumes(project: Project) -> None:
    """Each `run` resumes from the snapshot taken at the last session start: the ids the run
    recorded before it are known there too."""
    echo = tool("shell_exec", command="echo x >> runs.log")
    model = Scripted(lambda body: Reply(tool_calls=[echo], call_ids=("call_0",)))
    for turns in (3, 6, 9):
        clean(
            run_here(
                project, model, session={"max_turns": 2}, supervisor={"max_total_turns": turns}
            )
        )
    assert (project.state / "journal.jsonl.snapshot").exists()
    ids = [c["id"] for r in replies(project) for c in r["message"]["tool_calls"]]
    assert len(ids) == len(set(ids)) == 9
    started = [r["call_id"] for r in journal(project) if r["kind"] == "tool_started"]
    assert len(started) == len(set(started)) == 9
    assert len((project.workspace / "runs.log").read_text().splitlines()) == 9


@pytest.mark.slow
def test_a_session_opened_with_a_step_too_big_is_followed_by_one_that_carries_none(
    project: Project,
) -> None:
    """A journal written before carry-over left such steps out (every `run` exited 1 with "the
    system prompt and tools alone exceed the budget"): the next session carries nothing."""
    script = [Reply(tool_calls=[tool("list_dir", path=".")] * 1500)]
    model = Scripted(script)
    calls = {"max_tool_calls_per_reply": 5000}
    clean(run_here(project, model, window=8192, llm=calls, supervisor={"max_total_turns": 1}))
    records = journal(project)
    step = [
        MessageRecord.model_validate(r).message
        for r in records
        if r["kind"] == "message" and r["session"] == 1
    ]
    opening = next(r for r in records if r["kind"] == "session_start" and r["session"] == 2)
    session = opening["session"]
    bricked = [
        SessionEnd(session=session, reason=EndReason.CONTEXT_FULL),
        SessionStart(
            session=session + 1,
            reason="context_full",
            carried=len(step),
            messages=[
                SessionStart.model_validate(opening).messages[0],
                UserMessage(content="restarted", origin="restart"),
                *step,
            ],
        ),
    ]
    with (project.state / "journal.jsonl").open("a") as f:
        f.writelines(r.model_dump_json(exclude_none=True) + "\n" for r in bricked)
    clean(run_here(project, model, window=8192, llm=calls, supervisor={"max_total_turns": 3}))
    starts = [r for r in journal(project) if r["kind"] == "session_start"]
    assert starts[-2]["carried"] > 1500
    assert starts[-1]["carried"] == 0
    assert len(replies(project)) == 3


@pytest.mark.slow
def test_the_agent_is_told_of_dropped_calls_once_also_after_a_kill_nine(project: Project) -> None:
    calls: list[tuple[str, dict[str, Any] | str]] = [
        tool("shell_exec", command="touch started; sleep 30")
    ]
    calls += [tool("shell_exec", command=f"echo {n} >> runs.log") for n in range(3)]
    with ScriptedServer([Reply(tool_calls=calls)]) as server:
        project.configure(server.url, llm={"max_tool_calls_per_reply": 2})
        killed_once_started(project, "--max-turns", "1")
        clean(project.run("run", "--max-turns", "1"))  # finishes the step: tells
        clean(project.run("run", "--max-turns", "1"))  # the step is done: tells no more
    assert (project.workspace / "runs.log").read_text().splitlines() == ["0"]
    told = [
        r
        for r in journal(project)
        if r["kind"] == "message" and "2 were dropped" in r["message"].get("content", "")
    ]
    assert len(told) == 1


@pytest.mark.slow
def test_a_fifty_megabyte_argument_is_cut_with_its_reply_and_stored_nowhere(
    project: Project,
) -> None:
    huge = tool("file_write", path="huge.txt", content="x" * (50 << 20))
    with ScriptedServer([Reply(tool_calls=[huge])]) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "2")
    clean(result)
    assert not (project.workspace / "huge.txt").exists()
    assert replies(project)[0]["usage"]["finish_reason"] == "length"
    assert (project.state / "journal.jsonl").stat().st_size < 100_000
    (told,) = [
        r["message"]["content"]
        for r in journal(project)
        if r["kind"] == "message" and r["message"]["kind"] == "tool"
    ]
    assert "bytes into a file_write call, which was not run" in told, "the call is named"


@pytest.mark.slow
def test_call_ids_no_id_looks_like_are_renamed(project: Project) -> None:
    odd = ("c" * 10_000, "\x1b]0;T\x07\x1b[2J", "")
    calls = [tool("shell_exec", command=f"echo {n} >> runs.log") for n in range(3)]
    with ScriptedServer([Reply(tool_calls=list(calls), call_ids=odd)], dialect="llama") as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "2")
        sent_back = server.chat_requests()[1]["messages"]
    clean(result)
    assert sorted((project.workspace / "runs.log").read_text().split()) == ["0", "1", "2"]
    reply = replies(project)[0]
    ids = [c["id"] for c in reply["message"]["tool_calls"]]
    assert all(len(i) < 30 and i.isprintable() for i in ids)
    assert sorted(reply["renamed_calls"].values()) == sorted(odd[:2])
    assert "\x1b" not in json.dumps(sent_back[-4:], ensure_ascii=False)


# --- JSON nested past what the parser reads (a RecursionError, not a ValueError) ------------


def test_a_stream_nested_past_reading_is_a_transient_one_line_error() -> None:
    with pytest.raises(TransientError) as caught:
        complete(Reply(wire=events("[" * 200_000)))
    assert "nested too deeply" in str(caught.value)


@pytest.mark.slow
def test_arguments_nested_past_reading_are_not_run_nor_kept_and_the_run_resumes(
    project: Project,
) -> None:
    """Every reader of the journal looks into a call's arguments (masks, carry-over, search):
    arguments no parser can read must never reach it, or each resume would fail again."""
    deep = ("list_dir", "[" * 50_000)
    script = [
        Reply(tool_calls=[deep]),
        Reply(tool_calls=[tool("list_dir", path=".")]),
        Reply(tool_calls=[tool("list_dir", path=".")]),
    ]
    with ScriptedServer(script) as server:
        project.configure(server.url, session={"max_turns": 1})
        first = project.run("run", "--max-turns", "2")
        again = project.run("run", "--max-turns", "3")
    clean(first)
    clean(again)
    results = [
        r["message"]
        for r in journal(project)
        if r["kind"] == "message" and r["message"]["kind"] == "tool"
    ]
    assert results[0]["error"]
    assert "nest deeper than JSON can be read" in results[0]["content"]
    assert len(results) == 3
    assert (project.state / "journal.jsonl").stat().st_size < 50_000


# --- a reply compressed although the client asked for none ------------------------------------


def compressed_server(body: bytes, encoding: str) -> tuple[socket.socket, str]:
    """A loopback HTTP server that answers every request once with `body`, declared as
    `encoding`, whatever the request asked (as a misbehaving proxy would)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            connection, _ = listener.accept()
            with connection:
                connection.recv(1 << 20)
                head = (
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    f"Content-Encoding: {encoding}\r\nContent-Length: {len(body)}\r\n\r\n"
                )
                connection.sendall(head.encode() + body)

    threading.Thread(target=serve, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}/v1"


def sse(*payloads: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in payloads) + (
        b"data: [DONE]\n\n"
    )


def complete_at(url: str, **settings: Any) -> Completion:
    async def go() -> Completion:
        client = LLMClient(LLMSettings(base_url=url, model="scripted", **settings))
        try:
            return await client.complete(MESSAGES, [])
        finally:
            await client.aclose()

    return anyio.run(go)


def test_a_gzip_bomb_is_cut_at_the_byte_cap_counted_decoded() -> None:
    """65 KB of gzip that decodes to 64 MB: the cap counts what is decoded."""
    flood = sse(*[chunk({"content": "x" * (1 << 20)}) for _ in range(64)], chunk(finish="stop"))
    listener, url = compressed_server(gzip.compress(flood, 9), "gzip")
    with listener:
        completion = complete_at(url, max_reply_bytes=1 << 20)
    assert completion.finish_reason == "length"
    assert len(completion.message.content) <= 1 << 20


def test_a_reply_gzipped_by_a_proxy_is_read() -> None:
    listener, url = compressed_server(
        gzip.compress(sse(chunk({"content": "hello"}), chunk(finish="stop"))), "gzip"
    )
    with listener:
        completion = complete_at(url)
    assert (completion.message.content, completion.finish_reason) == ("hello", "stop")


def test_a_reply_in_an_encoding_the_harness_does_not_read_is_a_transient_error() -> None:
    listener, url = compressed_server(b"\x00" * 64, "br")
    with listener, pytest.raises(TransientError) as caught:
        complete_at(url)
    assert "'br'" in str(caught.value)


@pytest.mark.slow
def test_a_refusal_that_states_a_tiny_window_stops_the_run_with_one_line(project: Project) -> None:
    """A server that says its window is 1 token, and refuses every prompt: 1 is no window, so
    the run does not take it (warned once); it cannot open a session, and says so in one line;
    nothing is lost."""
    refusal = {
        "code": 400,
        "type": "exceed_context_size_error",
        "message": "request (900 tokens) exceeds the available context size (1 tokens)",
        "n_prompt_tokens": 900,
        "n_ctx": 1,
    }
    with ScriptedServer(lambda body: Reply(status=400, error_body=refusal)) as server:
        project.configure(server.url, context={"limit": 8192})
        result = project.run("run")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "a fresh session does not fit the context window" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not [e for e in project.events("context_window") if e.get("source") == "refusal"]
    (warned,) = [w for w in project.events("warning") if "stated 1 as its window" in w["message"]]
