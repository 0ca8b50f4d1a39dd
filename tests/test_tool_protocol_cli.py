"""`llm.tool_protocol` against a server on the wire: the scripted server plays Ollama refusing
tools for a model without tool support (HTTP 400 "... does not support tools"); `auto` goes over
to the text protocol and says so once, `native` stops with one line that says what to set."""

from __future__ import annotations

from typing import Any

import pytest

from ouroboros.model.scripted import Reply, ScriptedServer, tool, without_tools
from tests.conftest import Project

pytestmark = pytest.mark.slow  # every test here runs `python -m ouroboros`

ACTIONS = [
    Reply(text="First a file.\n```bash\necho made > made.txt\n```"),
    Reply(text='```json\n{"tool": "finish", "arguments": {"summary": "made it"}}\n```'),
]


def test_auto_goes_over_to_text_when_the_server_refuses_tools(project: Project) -> None:
    """`auto` is the default: a newcomer's model without tools (Ollama's gemma3) runs."""
    replies = iter(ACTIONS)
    with ScriptedServer(without_tools(lambda body: next(replies))) as server:
        project.configure(server.url)
        done = project.run("run")
        requests = server.chat_requests()
    assert done.returncode == 0, done.stderr
    assert ["tools" in r for r in requests] == [True, False, False]
    assert {m["role"] for r in requests[1:] for m in r["messages"]} <= {
        "system",
        "user",
        "assistant",
    }
    assert (project.workspace / "made.txt").read_text() == "made\n"
    switched = [e for e in project.events("warning") if "text protocol" in e["message"]]
    assert len(switched) == 1
    assert "does not support tools" in switched[0]["message"]
    assert project.events("run_end")[-1]["reason"] == "finish"
    # What people read works on a text-protocol run as on any other.
    status = project.run("status")
    assert "2 read from text (bash 1, json_action 1)" in status.stdout, status.stdout
    tail = project.run("tail")
    assert tail.returncode == 0, tail.stderr
    assert "text protocol" in tail.stdout
    report = project.run("report")
    assert report.returncode == 0, report.stderr


def test_native_stops_on_the_refusal_with_one_line_naming_the_setting(project: Project) -> None:
    with ScriptedServer(without_tools(lambda body: ACTIONS[0])) as server:
        project.configure(server.url, llm={"tool_protocol": "native"})
        done = project.run("run")
    assert done.returncode != 0
    assert "does not support tools" in done.stderr
    assert 'llm.tool_protocol = "text"' in done.stderr
    assert "Traceback" not in done.stderr


def test_the_switch_to_text_is_no_loss_of_the_servers_prompt_cache(project: Project) -> None:
    """Going over to text changes the start of the prompt (the system message, no schemas): the
    server processes it again once, which is the switch, not a server that drops its cache."""
    native = [Reply(tool_calls=[tool("shell_exec", command="ls")])] * 3
    replies = iter([*native, *[Reply(text="```bash\nls\n```")] * 3, *ACTIONS[1:]])
    asked = 0

    def respond(body: dict[str, Any]) -> Reply:
        """Tools taken three times, then refused (a model swapped for one without them)."""
        nonlocal asked
        asked += 1
        return without_tools(lambda _: next(replies))(body) if asked > 3 else next(replies)

    with ScriptedServer(respond, dialect="llama", n_ctx=8192) as server:
        project.configure(server.url, llm={"tool_protocol": "auto"})
        done = project.run("run")
        requests = server.chat_requests()
    assert done.returncode == 0, done.stderr
    assert ["tools" in r for r in requests] == [True] * 4 + [False] * 4
    assert not [w for w in project.events("warning") if "swa-full" in w["message"]]
    assert [u["cached_tokens"] > 0 for u in project.usage()][-2:] == [True, True]
