"""Told messages within a budget per step, delivered only by a request the server accepted: many
messages at a small window make no request refused for them, each is delivered in exactly one
accepted request, and one whose request is refused until its session ends is carried over or taken
again (also after a kill -9 at any record). In process against the scripted model."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from ouroboros.ground.state_folder import INBOX
from ouroboros.model.llm import ContextOverflow
from ouroboros.model.scripted import Reply, tool
from ouroboros.operator import inbox
from tests.conftest import Project
from tests.inprocess import Scripted, run_here
from tests.test_operator import _copy_cut

TOLD = "the data is in data.csv, not in data.json"


def note(i: int) -> str:
    """About 400 bytes and 130 tokens: each alone fits a step's share, two do not."""
    return f"NOTE{i:03d} " + " ".join(f"k{j % 10}" for j in range(130))


def notes_in(body: dict[str, Any]) -> set[str]:
    return {
        word
        for m in body["messages"]
        if m["role"] == "user"
        for word in str(m["content"]).split()
        if word.startswith("NOTE")
    }


def shell(n: int) -> Reply:
    return Reply(tool_calls=[tool("shell_exec", command=f"echo step {n}")])


def told_in(body: dict[str, Any]) -> bool:
    return any(m["role"] == "user" and TOLD in str(m["content"]) for m in body["messages"])


def deliveries(records: list[dict[str, Any]], message_id: str) -> list[int]:
    """The sessions where a reply the server accepted came while the message sat in the view
    (taken by a `told` record, or carried over by the session's start) and had not been
    delivered before: each is one delivery, in exactly one accepted request."""
    sits, found = None, []
    for r in records:
        if r["kind"] == "told" and r["message_id"] == message_id:
            sits = r["session"]
        elif r["kind"] == "session_start":
            carried = sits is not None and TOLD in json.dumps(r["messages"])
            sits = r["session"] if carried else None
        elif r["kind"] == "message" and r.get("usage") and r["session"] == sits:
            found.append(sits)
            sits = None
    return found


@pytest.mark.slow
def test_56_messages_at_a_4k_window_each_in_exactly_one_accepted_request(
    project: Project,
) -> None:
    """16 left before the run, 40 during it (two a step): without a share for them all, the
    first request is refused and the run stops as "a fresh session does not fit"."""
    for i in range(16):
        inbox.post(project.state, note(i))
    later = iter(range(16, 56))
    accepted: list[set[str]] = []

    def agent(body: dict[str, Any]) -> Reply:
        accepted.append(notes_in(body))
        if len(set().union(*accepted)) == 56:
            return Reply(tool_calls=[tool("finish", summary="read all 56")])
        for _ in range(2):
            if (i := next(later, None)) is not None:
                inbox.post(project.state, note(i))
        return shell(len(accepted))

    ran = run_here(project, Scripted(agent), supervisor={"max_total_turns": 120})
    assert ran.returncode == 0, ran.stderr
    assert "run stopped: finish" in ran.stdout
    # Delivered where it first sits in an accepted request; kept by the next (the history) or
    # gone, never shown anew.
    assert first_shown(accepted) == {f"NOTE{i:03d}": 1 for i in range(56)}
    assert json.loads((project.state / "status.json").read_text())["run"]["undelivered"] == []


@pytest.mark.slow
def test_10000_messages_waiting_at_a_4k_window_never_stop_a_run(project: Project) -> None:
    """Left as `tell` leaves them: the first posted, the rest its file under later names (hard
    links: quick to make). The run makes every turn it may, each step taking its share."""
    first = inbox.post(project.state, note(0))
    posted = project.state / INBOX / f"{first.message_id}.json"
    for i in range(1, 10_000):
        os.link(posted, posted.with_name(f"{first.message_id[:20]}-{i:08x}.json"))
    model = Scripted(lambda body: shell(len(body["messages"])))
    ran = run_here(project, model, supervisor={"max_total_turns": 30})
    assert ran.returncode == 0, ran.stderr
    assert "max_total_turns" in ran.stdout
    records = project.records("journal.jsonl")
    assert sum(1 for r in records if r["kind"] == "message" and r.get("usage")) == 30
    told = [r["message_id"] for r in records if r["kind"] == "told"]
    assert 20 <= len(told) == len(set(told))
    assert len(inbox.waiting(project.state)) == 10_000 - len(told)
    assert not project.events("context_overflow")


def refused_in_two_sessions(project: Project, refusals: list[dict[str, Any]]) -> Scripted:
    """The message is left at step 2; the server refuses every request that carries it in the
    first two sessions: the first ends on the refusals after its turns, and carries it over to
    the second, which ends on them with none, so the third carries nothing and must take it
    again. Then all is accepted."""

    def agent(body: dict[str, Any]) -> Reply:
        steps = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if steps == 2 and not refusals and not told_in(body):
            inbox.post(project.state, TOLD)
        opening = body["messages"][1]["content"]
        if told_in(body) and opening.startswith(("Session 1 ", "Session 2.")):
            refusals.append(body)
            raise ContextOverflow("the request exceeds the available context size")
        return shell(steps)

    return Scripted(agent)


def test_a_message_whose_requests_were_refused_is_delivered_by_a_later_session(
    project: Project,
) -> None:
    refusals: list[dict[str, Any]] = []
    model = refused_in_two_sessions(project, refusals)
    ran = run_here(project, model, supervisor={"max_total_turns": 6})
    assert ran.returncode == 0, ran.stderr
    records = project.records("journal.jsonl")
    starts = [r for r in records if r["kind"] == "session_start"]
    assert [TOLD in json.dumps(r["messages"]) for r in starts] == [False, True, False]
    told = [r for r in records if r["kind"] == "told"]
    assert [r["session"] for r in told] == [1, 3]
    assert len({r["message_id"] for r in told}) == 1
    assert deliveries(records, told[0]["message_id"]) == [3]
    accepted = [b for b in model.requests if b not in refusals]
    assert any(told_in(b) for b in accepted)
    assert all(json.dumps(b).count(TOLD) <= 1 for b in model.requests)
    summary = json.loads((project.state / "status.json").read_text())["run"]
    assert list(summary["delivered"]) == [told[0]["message_id"]]
    assert summary["undelivered"] == []


@pytest.mark.slow
def test_a_kill_at_any_record_neither_loses_nor_repeats_a_refused_message(
    project: Project, tmp_path: Path
) -> None:
    """Cut after each record from the message's first taking on; the run resumed against a
    server that accepts all delivers it in exactly one session."""
    run_here(project, refused_in_two_sessions(project, []), supervisor={"max_total_turns": 6})
    records = project.records("journal.jsonl")
    first = next(i for i, r in enumerate(records) if r["kind"] == "told")
    message_id = records[first]["message_id"]
    for keep in range(first + 1, len(records) + 1):
        copy = _copy_cut(project, tmp_path / f"cut-{keep}", keep, letter_file=True)
        model = Scripted(lambda body: shell(len(body["messages"])))
        ran = run_here(copy, model, supervisor={"max_total_turns": 6})
        assert ran.returncode == 0, (keep, ran.stderr)
        records = copy.records("journal.jsonl")
        assert len(deliveries(records, message_id)) == 1, keep
        taken = [r["session"] for r in records if r["kind"] == "told"]
        assert len(taken) == len(set(taken)), keep  # never twice in one session
        assert all(json.dumps(body).count(TOLD) <= 1 for body in model.requests), keep


def test_the_told_hook_runs_once_a_message_though_it_is_taken_again(project: Project) -> None:
    """Taken in session 1, refused until it ends, taken again in session 3: one notification."""
    out = project.root / "hooked.jsonl"
    record = f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read())"
    hook = {"events": ["told"], "command": [sys.executable, "-c", record]}
    model = refused_in_two_sessions(project, [])
    ran = run_here(
        project, model, supervisor={"max_total_turns": 6}, hooks={"min_interval_s": 0, "on": [hook]}
    )
    assert ran.returncode == 0, ran.stderr
    taken = [r["session"] for r in project.records("journal.jsonl") if r["kind"] == "told"]
    assert taken == [1, 3]
    told = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["record"]["session"] for e in told] == [1]


def first_shown(accepted: list[set[str]]) -> dict[str, int]:
    """How often each note appears anew in the accepted requests, in order (a note the next
    request keeps, in the history, is not anew)."""
    shown: dict[str, int] = {}
    before: set[str] = set()
    for seen in accepted:
        for word in seen - before:
            shown[word] = shown.get(word, 0) + 1
        before = seen
    return shown
