"""The harness's own share of every request: its instructions and the tool schemas, as sent."""

from __future__ import annotations

import json
from typing import Any

from ouroboros.context.tokens import tools_estimate
from ouroboros.model.scripted import Reply, tool
from tests.conftest import Project
from tests.inprocess import run_here

OPENING_CHARS = 2_750
"""Instructions and tool schemas of the first request, with a one-line SYSTEM_PROMPT.md."""


def opening_chars(body: dict[str, Any]) -> int:
    """Characters of the system message and of the tools' JSON, as the request carries them."""
    tools = len(json.dumps(body["tools"])) if "tools" in body else 0
    return len(body["messages"][0]["content"]) + tools


def names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def test_the_first_request_spends_little_on_the_harness(project: Project) -> None:
    (project.root / "SYSTEM_PROMPT.md").write_text("Keep a log of the weather in NOTES.md.\n")
    ran = run_here(project, [Reply(text="hi")], supervisor={"max_total_turns": 1})
    first = ran.chat_requests()[0]
    assert opening_chars(first) <= OPENING_CHARS, opening_chars(first)
    for schema in first["tools"]:  # each description said once: not again for the parameters
        function = schema["function"]
        assert "description" not in function["parameters"], function["name"]
        assert "default" not in json.dumps(function["parameters"]), function["name"]


def test_the_text_protocol_spends_little_on_the_harness(project: Project) -> None:
    (project.root / "SYSTEM_PROMPT.md").write_text("Keep a log of the weather in NOTES.md.\n")
    ran = run_here(
        project,
        [Reply(text="hi")],
        llm={"tool_protocol": "text"},
        supervisor={"max_total_turns": 1},
    )
    first = ran.chat_requests()[0]
    assert "tools" not in first
    assert opening_chars(first) <= OPENING_CHARS, opening_chars(first)


def test_search_context_is_offered_once_a_session_has_ended(project: Project) -> None:
    """Before any session has ended there is nothing to search; the tools a session is offered
    stay the same in each of its requests (the server's cached prefix holds)."""
    ran = run_here(
        project,
        [Reply(tool_calls=[tool("list_dir", path=".")])] * 4,
        llm={"tool_protocol": "native"},  # `auto` counts the larger of schemas and description
        session={"max_turns": 2},
        supervisor={"max_total_turns": 4},
    )
    assert ran.returncode == 0, ran.stderr
    offered = [names(body) for body in ran.chat_requests()]
    assert len(offered) == 4
    assert offered[0] == offered[1]
    assert "search_context" not in offered[0]
    assert offered[2] == offered[3] == [*offered[0][:-1], "search_context", offered[0][-1]]
    # The window's figures count the schemas each session sends, not the run's largest set.
    counted = [r["usage"]["raw_kinds"]["tools"] for r in project.records("journal.jsonl")
               if r.get("usage")]  # fmt: skip
    sent = [tools_estimate(body["tools"]) for body in ran.chat_requests()]
    assert counted == sent
    assert sent[0] < sent[2]
