"""Told messages within a budget per step: many messages at a small window make no request the
server refuses for them, and each is delivered in exactly one accepted request."""

from __future__ import annotations

from typing import Any

from ouroboros.model.scripted import Reply, tool
from ouroboros.run import inbox
from tests.conftest import Project
from tests.inprocess import Scripted, run_here


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


def test_56_messages_at_a_4k_window_each_in_exactly_one_accepted_request(
    project: Project,
) -> None:
    for i in range(16):
        inbox.post(project.state, note(i))
    later = iter(range(16, 56))
    accepted: list[set[str]] = []

    def agent(body: dict[str, Any]) -> Reply:
        accepted.append(notes_in(body))
        for _ in range(2):
            if (i := next(later, None)) is not None:
                inbox.post(project.state, note(i))
        step = len(accepted)
        return Reply(tool_calls=[tool("shell_exec", command=f"echo step {step}")])

    ran = run_here(project, Scripted(agent), supervisor={"max_total_turns": 120})
    assert ran.returncode == 0, ran.stderr
    assert "max_total_turns" in ran.stdout
    # Delivered where it first sits in an accepted request; kept by the next (the history) or
    # gone, never shown anew.
    shown: dict[str, int] = {}
    before: set[str] = set()
    for seen in accepted:
        for word in seen - before:
            shown[word] = shown.get(word, 0) + 1
        before = seen
    assert shown == {f"NOTE{i:03d}": 1 for i in range(56)}
