"""`llm.tool_protocol` against a scripted server on the wire: each server's refusal of tools
(vLLM's HTTP 400 without a tool parser, an older llama-server's HTTP 500 without `--jinja`) is
a switch for `auto` and one line for `native`, never retried; a text reply cut off at the output
limit in an action runs nothing and is told so (in prose, what an action looks like); and the
switch survives kill -9."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from ouroboros.model.scripted import Reply, Responder, ScriptedServer, without_tools
from ouroboros.state.fold import SWITCH
from tests.conftest import Project, wait_for

pytestmark = pytest.mark.slow  # every test here runs `python -m ouroboros`

TEXT_FINISH = Reply(text='```json\n{"tool": "finish", "arguments": {"summary": "done"}}\n```')
REFUSALS = {
    "vllm": (
        400,
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    ),
    "llama-server": (500, "tools param requires --jinja flag"),
}


def refusing(server: str, answer: Responder) -> Responder:
    status, message = REFUSALS[server]

    def respond(body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return answer(body)
        return Reply(status=status, error_body={"message": message, "type": "BadRequestError"})

    return respond


@pytest.mark.parametrize("server", sorted(REFUSALS))
def test_auto_goes_over_to_text_on_each_servers_refusal(project: Project, server: str) -> None:
    replies = iter([Reply(text="```bash\necho made > made.txt\n```"), TEXT_FINISH])
    with ScriptedServer(refusing(server, lambda body: next(replies))) as scripted:
        project.configure(scripted.url, llm={"tool_protocol": "auto"})
        done = project.run("run")
        requests = scripted.chat_requests()
    assert done.returncode == 0, done.stderr
    assert ["tools" in r for r in requests] == [True, False, False]  # refused once, not retried
    assert (project.workspace / "made.txt").read_text() == "made\n"
    (switched,) = [e for e in project.events("warning") if "text protocol" in e["message"]]
    assert REFUSALS[server][1] in switched["message"]


@pytest.mark.parametrize("server", sorted(REFUSALS))
def test_native_stops_on_each_servers_refusal_naming_text_and_auto(
    project: Project, server: str
) -> None:
    with ScriptedServer(refusing(server, lambda body: TEXT_FINISH)) as scripted:
        project.configure(scripted.url, llm={"tool_protocol": "native"})
        done = project.run("run")
        requests = scripted.chat_requests()
    assert done.returncode != 0
    assert len(requests) == 1
    assert REFUSALS[server][1] in done.stderr
    assert 'llm.tool_protocol = "text" (or "auto")' in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "cut",
    [
        "```bash\ncat > notes.md <<'EOF'\n# Notes\nmany lines",
        "```bash\necho one > one.txt\n```\n```bash\nrm -rf bui",
        "```bash\necho one > one.txt\n```\n<think>or should I",
    ],
    ids=["inside-its-action", "after-a-closed-block", "in-reasoning"],
)
def test_a_text_reply_cut_off_at_the_output_limit_runs_nothing_and_is_told_so(
    project: Project, cut: str
) -> None:
    script = [Reply(text=cut, completion_tokens=10**6), TEXT_FINISH]
    with ScriptedServer(script, dialect="llama", n_ctx=8192) as server:
        project.configure(server.url, llm={"tool_protocol": "text"})
        done = project.run("run")
        requests = server.chat_requests()
    assert done.returncode == 0, done.stderr
    told = requests[1]["messages"][-1]["content"]
    assert told.startswith("Your last reply was cut off at the output limit"), told
    assert not (project.workspace / "one.txt").exists()
    assert not (project.workspace / "notes.md").exists()


def test_prose_cut_off_at_the_output_limit_is_told_it_called_no_tool(
    project: Project,
) -> None:
    """No action was begun: what it lacked is the call first, not room."""
    script = [Reply(text="Let me think about this task. First", completion_tokens=10**6)]
    with ScriptedServer([*script, TEXT_FINISH], dialect="llama", n_ctx=8192) as server:
        project.configure(server.url, llm={"tool_protocol": "text"})
        done = project.run("run")
        requests = server.chat_requests()
    assert done.returncode == 0, done.stderr
    told = requests[1]["messages"][-1]["content"]
    assert told.startswith("Your last reply was cut off at the output limit"), told
    assert "before it called a tool, so nothing was run" in told


def test_the_switch_to_text_survives_kill_9(project: Project) -> None:
    """Killed while the first text-protocol request waits for its reply, just after the switch
    was journalled: the resumed run is text from its first request, and says so no more."""
    waiting, killed = threading.Event(), threading.Event()
    resumed = iter([Reply(text="```bash\necho made > made.txt\n```"), TEXT_FINISH])

    def agent(body: dict[str, Any]) -> Reply:
        if not killed.is_set():
            waiting.set()
            killed.wait(60)
            return Reply(text="(the run was killed)")
        return next(resumed)

    with ScriptedServer(without_tools(agent)) as server:
        project.configure(server.url, llm={"tool_protocol": "auto"})
        process = project.start("run")
        try:
            assert waiting.wait(60), "the first text-protocol request was sent"
            wait_for(
                lambda: [r for r in project.records("journal.jsonl") if r.get("once") == SWITCH]
            )
            os.kill(process.pid, signal.SIGKILL)
            process.communicate()
        finally:
            killed.set()
        killed_at = len(server.chat_requests())
        done = project.run("run")
        requests = server.chat_requests()[killed_at:]
    assert done.returncode == 0, done.stderr
    assert requests, "the resumed run asked the model"
    assert not any("tools" in r for r in requests)
    assert (project.workspace / "made.txt").read_text() == "made\n"
    switched = [e for e in project.events("warning") if "text protocol" in e["message"]]
    assert len(switched) == 1
