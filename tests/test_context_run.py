"""Context management: masking, wind-down and restart in a whole run in process; overflow,
truncation and the prompt cache seen from the wire (the loopback server)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from ouroboros.ground.jsonl import JsonlReader
from ouroboros.model.llm import FatalError
from ouroboros.model.scripted import Reply, ScriptedServer, count_tokens, tool
from ouroboros.model.servers import ServerInfo, _ollama_counts_whole_prompt
from ouroboros.state.records import (
    JOURNAL_RECORD,
    MessageRecord,
    RunEnd,
    SessionEnd,
    SessionStart,
    WindDown,
)
from tests.conftest import Project
from tests.inprocess import run_here

PLACEHOLDER = "[file_read result masked:"


def fill_workspace(project: Project, files: int = 12, words: int = 400) -> None:
    for i in range(files):
        body = "\n".join(f"def function_{i}_{n}(x): return x + {n}" for n in range(words // 8))
        (project.workspace / f"mod{i}.py").write_text(body + "\n")


def reader(files: int = 12) -> Any:
    """An agent that reads one module after another, forever, whatever it is told."""
    paths = itertools.cycle(f"mod{i}.py" for i in range(files))
    return lambda body: Reply(text="Reading on.", tool_calls=[tool("file_read", path=next(paths))])


DECISIONS = {
    "mask": "context_mask",
    "cut": "context_cut",
    "compaction": "compaction",
    "wind_down": "wind_down",
    "session_start": "session_start",
    "session_end": "session_end",
    "run_start": "run_start",
    "run_end": "run_end",
}


def assert_decisions_agree(project: Project) -> None:
    """Every decision and boundary the journal holds is in the event log, in the same order."""
    journal = [
        DECISIONS[r["kind"]] for r in project.records("journal.jsonl") if r["kind"] in DECISIONS
    ]
    events = [e["kind"] for e in project.events() if e["kind"] in DECISIONS.values()]
    assert journal == events
    assert [e["seq"] for e in project.events()] == sorted(e["seq"] for e in project.events())


def assert_wind_downs_in_place(
    project: Project, requests: list[dict[str, Any]], turns: int = 2
) -> int:
    """Each wind-down notice is the last message of the next request, right after the step that
    crossed the line; the session then got exactly `turns` replies and ended for that (unless
    the run stopped first). Returns how many there were."""
    records = list(JsonlReader(project.state / "journal.jsonl").records(JOURNAL_RECORD))
    notices = [r for r in records if isinstance(r, WindDown) and r.message is not None]
    for notice in notices:
        assert notice.message is not None
        sent = [b for b in requests if b["messages"][-1]["content"] == notice.message.content]
        assert len(sent) == 1, "a notice is sent last exactly once"
        at = records.index(notice)
        # Right after the step that crossed the line, or the opening of a session that starts
        # past it (its carried step is big, the line low: the run's replies are long).
        opening = isinstance(records[at - 1], SessionStart)
        before = sent[0]["messages"][-2]
        assert opening or before["role"] in ("tool", "assistant"), "not right after the step"
        after = records[at + 1 :]
        end = next((i for i, r in enumerate(after) if isinstance(r, SessionEnd | RunEnd)), None)
        session = after if end is None else after[:end]
        replies = [r for r in session if isinstance(r, MessageRecord) and r.usage is not None]
        closing = after[end] if end is not None else None
        if isinstance(closing, SessionEnd):
            assert len(replies) == turns
            assert closing.detail == "wind-down replies used"
        else:
            assert len(replies) <= turns
    return len(notices)


def tool_contents(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_soft_mask_hard_wind_down_then_restart(project: Project) -> None:
    fill_workspace(project, words=200)
    result = run_here(
        project,
        reader(),
        window=4096,
        supervisor={"max_restarts": 1, "max_total_turns": 100},
        loops={"session_repeat_after": 0},  # `reader` rereads the same files in every session
    )
    requests = result.chat_requests()
    assert result.returncode == 0, result.stderr

    # Masking happened, oldest first, and the newest observations stayed intact.
    masked_at = next(
        i for i, b in enumerate(requests) if any(PLACEHOLDER in c for c in tool_contents(b))
    )
    restarted_at = next(i for i, b in enumerate(requests) if "Session 2." in json.dumps(b))
    # Steps carried before the last one may come as placeholders (`select_carryover`): they are
    # not among the session's newest results it keeps whole.
    carried_masked = {
        m["tool_call_id"]
        for m in requests[restarted_at]["messages"]
        if m["role"] == "tool" and PLACEHOLDER in m["content"]
    }
    for index, body in enumerate(requests[masked_at:], start=masked_at):
        skipped = carried_masked if index >= restarted_at else set()
        contents = [
            m["content"]
            for m in body["messages"]
            if m["role"] == "tool" and m["tool_call_id"] not in skipped
        ]
        # Within a session the three newest stay; in a wind-down the results the model has
        # seen may give way to the replies it was promised, never those it has not seen (the
        # results after the last reply, as in a new session's first request).
        last_reply = max(i for i, m in enumerate(body["messages"]) if m["role"] == "assistant")
        unseen = tool_contents({"messages": body["messages"][last_reply:]})
        winding = "Save what matters" in json.dumps(body["messages"])
        protected = unseen if winding or index == restarted_at else contents[-3:]
        assert protected
        assert all(PLACEHOLDER not in c for c in protected), "a protected result was masked"
        flags = [PLACEHOLDER in c for c in contents]
        # Oldest first: once a result is intact, every newer one is intact too (per session).
        if True in flags:
            assert flags == sorted(flags, reverse=True)
    placeholder = next(c for c in tool_contents(requests[-1]) if PLACEHOLDER in c)
    path = placeholder.removeprefix(PLACEHOLDER).split(",")[0].strip()
    # The bytes file_read gave of the file it stands for (its last newline is not shown).
    size = len((project.workspace / path).read_bytes().removesuffix(b"\n"))
    assert f'25 lines, {size:,} bytes, first "def function_' in placeholder

    masks = project.events("context_mask")
    assert masks
    assert all(m["projected_after"] < m["projected_before"] for m in masks)
    assert_decisions_agree(project)
    assert all(m["estimated_reclaimed"] > 0 for m in masks)

    # Wind-down message, then the session ended and a second one began with a restart marker.
    assert len(project.events("wind_down")) == 2
    assert assert_wind_downs_in_place(project, requests) == 2
    restarts = project.events("session_restart")
    assert len(restarts) == 1
    assert restarts[0]["session"] == 2
    first_of_two = next(b for b in requests if "Session 2." in json.dumps(b["messages"][:2]))
    assert "ended because the context was full" in first_of_two["messages"][1]["content"]
    assert "max_restarts" in result.stdout

    # Never a prompt the server had to refuse, and every request keeps call/result pairs whole.
    assert not project.events("context_overflow")
    for body in requests:
        pending: set[str] = set()
        for m in body["messages"]:
            if m["role"] == "tool":
                pending.remove(m["tool_call_id"])
            else:
                assert not pending
                pending = {c["id"] for c in m.get("tool_calls") or []}
        assert not pending
    usage = project.usage()
    assert max(u["prompt_tokens"] for u in usage) < 4096 - 256
    assert not [w for w in project.events("warning") if "swa-full" in w["message"]]


@pytest.mark.slow
def test_a_server_that_drops_its_cache_after_a_change_is_named_once(project: Project) -> None:
    """A sliding-window model on llama-server without --swa-full processes the whole prompt
    again after every masking round: the run says so once, with the flag, from the figures."""
    fill_workspace(project, words=200)
    with ScriptedServer(reader(), dialect="llama", n_ctx=4096, swa_full=False) as server:
        project.configure(server.url, supervisor={"max_restarts": 1, "max_total_turns": 100})
        project.run("run")
    warnings = [w for w in project.events("warning") if "swa-full" in w["message"]]
    assert len(warnings) == 1
    assert project.events("context_mask")[0]["seq"] < warnings[0]["seq"]


@pytest.mark.slow
def test_configured_window_larger_than_the_servers_uses_the_smaller(project: Project) -> None:
    fill_workspace(project, files=6, words=600)
    with ScriptedServer(reader(6), dialect="llama", n_ctx=3000) as server:
        project.configure(server.url, context={"limit": 16000}, supervisor={"max_total_turns": 60})
        result = project.run("run")
    assert result.returncode == 0, result.stderr
    warnings = [w["message"] for w in project.events("warning")]
    assert any(
        "context.limit is 16000 but the server runs a 3000-token window" in w for w in warnings
    )
    assert "3000-token window" in result.stdout
    assert not project.events("context_overflow")
    assert {u["context_limit"] for u in project.usage()} == {3000}
    assert max(u["prompt_tokens"] for u in project.usage()) < 3000
    # `status` repeats it long after the start scrolled away.
    status = " ".join(project.run("status").stdout.replace("│", " ").split())
    assert "warning" in status
    assert "context.limit is 16000 but the server runs a 3000-token window" in status


@pytest.mark.slow
def test_overflow_when_server_hides_its_window(project: Project) -> None:
    fill_workspace(project, files=6, words=600)
    # An unknown server with a configured (too large) window: it does not say its own.
    hidden = ServerInfo("unknown", None, "the server does not report its window")
    result = run_here(
        project,
        reader(6),
        window=3000,
        info=hidden,
        context={"limit": 16000, "protected_observations": 1},
        supervisor={"max_total_turns": 60},
    )
    requests = result.chat_requests()
    assert result.returncode == 0, result.stderr
    overflows = project.events("context_overflow")
    assert overflows, "expected the server to refuse an oversized prompt"
    assert overflows[0]["n_prompt_tokens"] >= 3000
    assert overflows[0]["n_ctx"] == 3000
    first = overflows[0]
    # The retry after the first overflow was smaller: masked, not the same request again.
    refused = next(i for i, b in enumerate(requests) if count_tokens(b) >= 3000)
    retry = requests[refused + 1]
    assert json.dumps(retry) != json.dumps(requests[refused])
    assert any(PLACEHOLDER in c for c in tool_contents(retry))
    assert first["attempt"] == 1


@pytest.mark.slow
def test_silent_truncation_is_detected(project: Project) -> None:
    fill_workspace(project, files=4, words=800)
    paths = itertools.cycle(f"mod{i}.py" for i in range(4))
    replies = [Reply(tool_calls=[tool("file_read", path=next(paths))]) for _ in range(3)]
    # Ollama cut the prompt and reported what it kept: a count far below what was sent.
    replies.append(Reply(tool_calls=[tool("file_read", path="mod3.py")], prompt_tokens=700))
    replies.extend(Reply(text="ok") for _ in range(4))
    with ScriptedServer(replies, dialect="ollama", n_ctx=32768) as server:
        project.configure(server.url, supervisor={"max_total_turns": 6, "max_restarts": 0})
        result = project.run("run")
        requests = server.chat_requests()
    assert result.returncode == 0, result.stderr
    warnings = project.events("silent_truncation")
    assert len(warnings) == 1
    assert warnings[0]["reported_prompt_tokens"] == 700
    assert warnings[0]["estimated_prompt_tokens"] > 1400
    # Treated as over the hard threshold: the agent is told to wind down at once, after the
    # step whose count was cut (the fourth reply and its result).
    assert assert_wind_downs_in_place(project, requests) == 1
    assert "Save what matters" in requests[4]["messages"][-1]["content"]


@pytest.mark.slow
def test_template_without_tools_is_no_silent_truncation(project: Project) -> None:
    """Seen on the real llama-server with Gemma 3: the template drops the tool schemas, so the
    server counts far fewer tokens than the harness would have estimated with them (in the
    native protocol, which `auto` leaves for text at once on such a template)."""
    with ScriptedServer(reader(), dialect="llama", n_ctx=8192, renders_tools=False) as server:
        fill_workspace(project, files=12, words=80)
        project.configure(
            server.url, llm={"tool_protocol": "native"}, supervisor={"max_total_turns": 60}
        )
        result = project.run("run")
    assert result.returncode == 0, result.stderr
    assert any("cannot render tools" in w["message"] for w in project.events("warning"))
    assert not project.events("silent_truncation")
    assert not project.events("wind_down")
    for line in project.usage()[1:]:
        assert (
            abs(line["estimated_prompt_tokens"] - line["prompt_tokens"])
            < 0.25 * line["prompt_tokens"]
        )


@pytest.mark.slow
def test_ollama_0_30_0_counts_are_estimated_not_taken_for_truncation(project: Project) -> None:
    """Ollama 0.30.0 counted only the prompt tokens it had to process (servers.md 1b): with its
    cache that is far below what was sent, which must read neither as a measurement nor as a
    silent truncation."""
    fill_workspace(project, files=4, words=400)
    server = ScriptedServer(reader(4), dialect="ollama", n_ctx=32768, ollama_version="0.30.0")
    with server:
        project.configure(server.url, supervisor={"max_total_turns": 5, "max_restarts": 0})
        result = project.run("run")
    assert result.returncode == 0, result.stderr
    # The cache left out: far below what was sent, which the harness must not take as a count.
    assert server.reported[-1]["prompt_tokens"] < count_tokens(server.chat_requests()[-1]) / 2
    assert any("0.30.1" in w["message"] for w in project.events("warning"))
    assert not project.events("silent_truncation")
    assert not project.events("wind_down")
    assert {line["source"] for line in project.usage()} == {"estimate"}


@pytest.mark.parametrize(
    ("version", "whole"),
    [("0.30.0", False), ("0.30.0-rc2", False), ("0.1.32", False), ("0.30.1", True),
     ("0.29.6", True), ("0.33.0", True), ("main", True)],
)  # fmt: skip
def test_which_ollama_versions_count_the_whole_prompt(version: str, whole: bool) -> None:
    assert _ollama_counts_whole_prompt(version) is whole


def test_mask_round_logged_when_its_call_fails(project: Project) -> None:
    """A masking round whose prompt never got an answer is in the event log all the same."""
    fill_workspace(project, words=200)
    read_on = reader()

    def until_masked(body: dict[str, Any]) -> Reply:
        if any(PLACEHOLDER in c for c in tool_contents(body)):
            raise FatalError("HTTP 400 from the server: invalid request")
        return read_on(body)  # type: ignore[no-any-return]

    result = run_here(project, until_masked, window=4096)
    assert result.returncode != 0
    journal_masks = [r for r in project.records("journal.jsonl") if r["kind"] == "mask"]
    assert journal_masks
    assert_decisions_agree(project)


def breaks_per_session(requests: list[dict[str, Any]]) -> list[int]:
    """Per session, the requests that changed what the one before had sent (a server's prompt
    cache ends at the change): each masking round is one. A session's first request changes
    its opening message, and is a restart, not a break."""
    breaks: list[int] = [0] if requests else []
    for before, now in itertools.pairwise(requests):
        old, new = before["messages"], now["messages"]
        if old[1] != new[1]:
            breaks.append(0)
        else:
            breaks[-1] += new[: len(old)] != old
    return breaks


def processed_share(project: Project) -> float:
    usage = project.usage()
    processed = sum(int(u["processed_tokens"]) for u in usage)
    return processed / sum(int(u["prompt_tokens"]) for u in usage)


@pytest.mark.slow
def test_masking_rounds_go_down_to_the_low_water_mark(project: Project) -> None:
    """Masking rewrites the middle of the prompt, and the server processes again everything
    after the first change: a round goes down to the low-water mark, so the calls after it
    only append."""
    fill_workspace(project, files=40, words=480)
    with ScriptedServer(reader(40), dialect="llama", n_ctx=16384) as server:
        project.configure(server.url, supervisor={"max_total_turns": 45})
        project.run("run")
        breaks = breaks_per_session(server.chat_requests())
    # Measured: 4 rounds, 12% of the prompt tokens processed. Rounds that mask just enough to
    # pass under the soft line each call (the policy before, mask_low_water = 0.6): 9 and 21%.
    assert breaks == [len(project.events("context_mask"))]
    assert breaks[0] <= 5
    assert processed_share(project) < 0.15


@pytest.mark.slow
def test_masking_rounds_wait_until_worth_their_break(project: Project) -> None:
    """With long replies (as real ones are) the prompt cannot go down far: a round that frees
    little for what the server must process again waits for a larger one."""
    fill_workspace(project, files=40, words=480)
    paths = itertools.cycle(f"mod{i}.py" for i in range(40))
    thought = "Reading on, and thinking it over at length. " * 40  # long replies, as real ones

    def thinker(body: dict[str, Any]) -> Reply:
        return Reply(text=thought, tool_calls=[tool("file_read", path=next(paths))])

    with ScriptedServer(thinker, dialect="llama", n_ctx=16384) as server:
        project.configure(server.url, supervisor={"max_total_turns": 60})
        project.run("run")
        requests = server.chat_requests()
    breaks = breaks_per_session(requests)
    share = processed_share(project)
    # Measured: 9, 9 and 3 breaks, 21.3% of the prompt tokens processed. Rounds that do not
    # wait to be worth their break: 12, 12 and 6, and 24.3%. (Before the plan tool's schema
    # joined every prompt: 7, 7 and 4, 20.7%; 11, 11 and 8, 24.9%.)
    assert len(breaks) == 3
    assert max(breaks) <= 9
    assert share < 0.23
