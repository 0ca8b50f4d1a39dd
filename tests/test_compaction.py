"""LLM compaction (context.strategy): whole runs in process with a scripted recap; the
`compact` command through the CLI and the loopback server."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from hypothesis import given, settings

from ouroboros.context.compact import RECAP_HEADER, RECAP_SYSTEM, split_point
from ouroboros.context.tokens import raw_estimate
from ouroboros.ground.messages import AssistantMessage, Message, ToolMessage, tool_call_pairs_valid
from ouroboros.model.llm import ContextOverflow, LLMError
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from tests.conftest import Project
from tests.inprocess import run_here
from tests.test_context_policies import histories
from tests.test_context_run import PLACEHOLDER, fill_workspace

RECAP = "## Overall goal\nRead every module.\n## Current plan\nKeep reading."


def agent(recap: Reply | LLMError) -> Any:
    """Reads modules one after another; answers a recap request (no tools) with `recap`
    (or fails it, as the server would)."""
    paths = itertools.cycle(f"mod{i}.py" for i in range(12))

    def respond(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"] == RECAP_SYSTEM:
            if isinstance(recap, LLMError):
                raise recap
            return recap
        return Reply(text="Reading on.", tool_calls=[tool("file_read", path=next(paths))])

    return respond


def recap_calls(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in requests if b["messages"][0]["content"] == RECAP_SYSTEM]


def run(
    project: Project, recap: Reply | LLMError, strategy: str, turns: int = 30
) -> list[dict[str, Any]]:
    fill_workspace(project, words=300)
    result = run_here(
        project,
        agent(recap),
        window=4096,
        context={"strategy": strategy},
        supervisor={"max_total_turns": turns, "max_restarts": 0},
    )
    assert result.returncode == 0, result.stderr
    return result.chat_requests()


def test_compaction_replaces_the_older_part_with_a_recap(project: Project) -> None:
    requests = run(project, Reply(text=RECAP), "compact")
    compactions = project.events("compaction")
    assert compactions
    assert compactions[0]["projected_after"] < compactions[0]["projected_before"]
    calls = recap_calls(requests)
    assert "## Overall goal" in calls[0]["messages"][1]["content"]
    assert "[file_read result]" in calls[0]["messages"][1]["content"]
    assert "tools" not in calls[0]
    after = requests[requests.index(calls[0]) + 1]
    assert after["messages"][1]["content"] == f"{RECAP_HEADER}\n{RECAP}"
    assert after["messages"][0]["content"] != RECAP_SYSTEM
    conversation = [b for b in requests if b not in calls]
    assert not any(PLACEHOLDER in str(b["messages"]) for b in conversation), "masked, not compacted"
    # The recap call's tokens land in token_usage.jsonl, marked, and are not turns.
    usage = project.usage()
    marked = [u for u in usage if u.get("purpose") == "compaction"]
    assert len(marked) == len(calls)
    assert len([u for u in usage if "purpose" not in u]) == 30
    # The journal keeps everything: every tool result of the session is still there in full.
    results = [
        r["message"]
        for r in project.records("journal.jsonl")
        if r["kind"] == "message" and r["message"]["kind"] == "tool"
    ]
    assert len(results) == 30
    assert all(r["content"].startswith("def function_") for r in results)


def test_inflated_recap_is_discarded_and_masking_takes_over(project: Project) -> None:
    inflated = Reply(text="## Overall goal\n" + "very detailed notes " * 2000)
    requests = run(project, inflated, "compact")
    failures = project.events("compaction_failed")
    assert failures
    assert failures[0]["projected_after"] >= failures[0]["projected_before"]
    assert not project.events("compaction")
    assert any(PLACEHOLDER in str(b["messages"]) for b in requests), "no fallback to masking"
    # Not retried every turn: only after the history grew substantially.
    assert len(recap_calls(requests)) < len(project.events("context_mask"))
    assert len(recap_calls(requests)) <= 3


def test_failed_recap_call_keeps_the_history(project: Project) -> None:
    refusal = ContextOverflow(
        "request (9000 tokens) exceeds the available context size (4096 tokens)", 9000, 4096
    )
    requests = run(project, refusal, "mask_then_compact")
    failures = project.events("compaction_failed")
    assert any("recap call failed" in f["message"] for f in failures)
    assert any(PLACEHOLDER in str(b["messages"]) for b in requests)
    turns = len([u for u in project.usage() if "purpose" not in u])
    results = [
        r["message"]
        for r in project.records("journal.jsonl")
        if r["kind"] == "message" and r["message"]["kind"] == "tool"
    ]
    assert len(results) == turns
    assert all(r["content"].startswith("def function_") for r in results)


def test_compaction_survives_a_resume(project: Project) -> None:
    run(project, Reply(text=RECAP), "compact", turns=20)
    resumed = run_here(
        project,
        agent(Reply(text=RECAP)),
        window=4096,
        context={"strategy": "compact"},
        supervisor={"max_total_turns": 21, "max_restarts": 0},
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.chat_requests()[0]["messages"][1]["content"].startswith(RECAP_HEADER)


@given(histories())
@settings(max_examples=200, deadline=None)
def test_split_points_leave_pairs_whole(history: list[Message]) -> None:
    raw = [raw_estimate(m) for m in history]
    for keep in (0.1, 0.3, 0.7):
        split = split_point(history, 1, raw, keep)
        if split is None:
            continue
        assert 1 < split < len(history)
        assert not isinstance(history[split], ToolMessage), "split between a call and results"
        assert tool_call_pairs_valid(history[split:])
        assert sum(raw[split:]) >= sum(raw[1:]) * keep * 0.999


@pytest.mark.parametrize(("keep", "expected"), [(0.3, 6), (0.6, 4), (0.95, None)])
def test_split_point_examples(keep: float, expected: int | None) -> None:
    from ouroboros.ground.messages import SystemMessage, ToolCall, UserMessage

    def step(i: int) -> list[Message]:
        call = ToolCall(id=f"c{i}", name="file_read", arguments="{}")
        return [
            AssistantMessage(tool_calls=(call,)),
            ToolMessage(tool_call_id=f"c{i}", name="file_read", content="x" * 400),
        ]

    history: list[Message] = [
        SystemMessage(content="s"),
        UserMessage(content="go"),
        *step(1),
        *step(2),
        *step(3),
    ]
    raw = [raw_estimate(m) for m in history]
    assert split_point(history, 1, raw, keep) == expected


@pytest.mark.slow
def test_compact_command_asks_the_running_supervisor(project: Project) -> None:

    fill_workspace(project, files=12, words=120)
    paths = itertools.cycle(f"mod{i}.py" for i in range(12))
    calls = itertools.count(1)
    sixth_call, compact_asked = threading.Event(), threading.Event()

    def respond(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"] == RECAP_SYSTEM:
            return Reply(text=RECAP)
        if next(calls) == 6:
            # The run waits on the command, not the command on the clock: under load the run
            # used up its turns before `compact` (a process of its own) reached it. (The
            # server holds its lock while this answers: wait on events, not on its requests.)
            sixth_call.set()
            compact_asked.wait(timeout=120)
        return Reply(tool_calls=[tool("file_read", path=next(paths))])

    with ScriptedServer(respond, dialect="llama", n_ctx=32768) as server:
        project.configure(server.url, supervisor={"max_total_turns": 14})
        process = project.start("run")
        assert sixth_call.wait(timeout=120)
        asked = project.run("compact")
        compact_asked.set()
        _, stderr = process.communicate(timeout=60)
    assert asked.returncode == 0
    assert "compact the context at its next turn" in asked.stderr
    assert process.returncode == 0, stderr
    compactions = project.events("compaction")
    assert len(compactions) == 1
    assert compactions[0]["forced"] is True
    assert not (project.state / "compact").exists()
