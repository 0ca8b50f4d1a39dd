"""`llm.tool_protocol` through whole runs in the process (`run_here`): a call written as text
recovered in the native protocol, the text protocol's requests, its replies sent back as written
and what they are told, its steps managed as native ones (masked, carried over), and `auto`
staying native for calls written as text and going over to text where tools cannot be rendered
(once said, kept on resume)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from ouroboros.ground.config_file import load_settings
from ouroboros.ground.jsonl import JsonlReader
from ouroboros.ground.messages import AssistantMessage, ToolMessage
from ouroboros.model.scripted import Reply, tool
from ouroboros.observe.status import read_status, render_status
from ouroboros.operator import inbox
from ouroboros.state.records import JOURNAL_RECORD, MessageRecord, SessionStart
from tests.conftest import Project
from tests.inprocess import Scripted, run_here

HERMES_LS = '<tool_call>{"name": "shell_exec", "arguments": {"command": "ls"}}</tool_call>'
FINISH = Reply(tool_calls=[tool("finish", summary="done")])
TEXT_FINISH = Reply(text='```json\n{"tool": "finish", "arguments": {"summary": "done"}}\n```')


def messages(project: Project) -> list[MessageRecord]:
    records = JsonlReader(project.state / "journal.jsonl").records(JOURNAL_RECORD)
    return [r for r in records if isinstance(r, MessageRecord)]


def replies(project: Project) -> list[tuple[AssistantMessage, str | None]]:
    """Each reply as journalled, with the format its calls were read from text in."""
    return [
        (r.message, r.calls_from_text)
        for r in messages(project)
        if isinstance(r.message, AssistantMessage)
    ]


def roles(body: dict[str, Any]) -> set[str]:
    return {m["role"] for m in body["messages"]}


def shown_status(project: Project) -> str:
    out = io.StringIO()
    settings = load_settings(project.root / "config.toml")
    Console(file=out, width=200).print(render_status(read_status(project.state), lambda: settings))
    return out.getvalue()


def test_a_call_written_as_text_is_recovered_run_and_counted(project: Project) -> None:
    script = [Reply(text=f"Looking first.\n{HERMES_LS}"), Reply(text=HERMES_LS), FINISH]
    ran = run_here(project, script)
    assert ran.returncode == 0, ran.stderr
    first, written = replies(project)[0]
    assert written == "hermes"
    (call,) = first.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("shell_exec", {"command": "ls"})
    assert first.content == "Looking first."
    (result,) = [r.message for r in messages(project) if isinstance(r.message, ToolMessage)][:1]
    assert result.tool_call_id == call.id
    assert not result.error
    # The next request shows the call as a call: the model sees the format that works.
    second = ran.chat_requests()[1]
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "shell_exec"
    assert "tools" in second
    assert "2 read from text (hermes 2)" in shown_status(project)
    # Each recovered call has an id of its own: none repeated, none renamed.
    ids = [c.id for reply, _ in replies(project) for c in reply.tool_calls]
    assert len(set(ids)) == len(ids) == 3
    assert not [e for e in project.events("warning") if "ids" in e["message"]]


def test_calls_written_as_text_run_one_a_reply_and_the_model_is_told(project: Project) -> None:
    """The real small model read a file and overwrote it with made-up text in one reply, before
    the read's result came back: only the first call runs."""
    (project.workspace / "notes.txt").write_text("keep me\n")
    chain = (
        '{"name": "file_read", "arguments": {"path": "notes.txt"}}\n'
        '{"name": "file_write", "arguments": {"path": "notes.txt", "content": "made up"}}'
    )
    ran = run_here(project, [Reply(text=chain), FINISH])
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "notes.txt").read_text() == "keep me\n"
    first, written = replies(project)[0]
    assert [c.name for c in first.tool_calls] == ["file_read"]
    told = ran.chat_requests()[1]["messages"]
    assert "keep me" in told[-2]["content"]  # the read's result, then what was not run
    assert told[-1] == {
        "role": "user",
        "content": "Your last reply wrote 2 tool calls; only the first ran. Write one call a "
        "reply, the next once you have seen its result.",
    }


def test_a_chain_of_calls_to_the_output_limit_is_told_only_that_one_ran(project: Project) -> None:
    """The real model wrote the same calls again and again to the limit: the one that ran was
    whole, so it is not told its last call may be cut."""
    chain = "".join(f'{{"name": "list_dir", "arguments": {{"path": "d{n}"}}}}\n' for n in range(40))
    ran = run_here(project, [Reply(text=chain, completion_tokens=10**6), FINISH])
    assert ran.returncode == 0, ran.stderr
    assert replies(project)[0][0].tool_calls[0].name == "list_dir"
    said = [m["content"] for m in ran.chat_requests()[1]["messages"] if m["role"] == "user"]
    assert "only the first ran" in said[-1]
    assert not any("cut off at the output limit" in s for s in said)


@pytest.mark.parametrize("protocol", ["native", "text"])
def test_a_file_block_after_a_read_writes_that_file(project: Project, protocol: str) -> None:
    """The real small model, given a file and a change, writes the changed file in a fenced
    block after its path: in either protocol, once read, the file gets the block's text; a
    block no path names changes nothing."""
    (project.workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    read = Reply(text='{"name": "file_read", "arguments": {"path": "calc.py"}}')
    bare = Reply(text="```python\nprint('no file named')\n```")
    block = Reply(text="calc.py\n```python\ndef add(a, b):\n    return a + b\n```")
    finish = TEXT_FINISH if protocol == "text" else FINISH
    ran = run_here(project, [read, bare, block, finish], llm={"tool_protocol": protocol})
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert [form for _, form in replies(project)][:3] == ["json", None, "file_block"]
    said = ran.chat_requests()[2]["messages"][-1]["content"]
    assert "its path on a line, then its whole new text in a fenced block" in said


def test_one_call_written_again_and_again_to_the_output_limit_is_not_told_it_may_be_cut(
    project: Project,
) -> None:
    """The real model wrote one call a dozen times to the limit: it runs once, was whole as read
    from the text, and nothing was dropped: "its last call may be incomplete" would be false
    (and another sentence to copy)."""
    again = '{"name": "list_dir", "arguments": {"path": "."}}\n' * 40
    ran = run_here(project, [Reply(text=again, completion_tokens=10**6), FINISH])
    assert ran.returncode == 0, ran.stderr
    assert len(replies(project)[0][0].tool_calls) == 1
    said = [m["content"] for m in ran.chat_requests()[1]["messages"] if m["role"] == "user"]
    assert not any("cut off at the output limit" in s for s in said), said


def test_a_call_of_what_the_task_asks_to_write_is_answered_from_the_task(
    project: Project,
) -> None:
    (project.root / "SYSTEM_PROMPT.md").write_text(
        "# Purpose\nAdd a function `square(x)` to `mathlib.py`.\n"
    )
    called = Reply(text='{"name": "square", "arguments": {"x": 3}}')
    ran = run_here(project, [called, FINISH])
    assert ran.returncode == 0, ran.stderr
    told = ran.chat_requests()[1]["messages"][-1]
    assert told["role"] == "user"
    assert "`square` is in your task" in told["content"]
    assert told["content"].endswith('{"name": "file_read", "arguments": {"path": "mathlib.py"}}')


def test_a_near_miss_stays_text_and_the_agent_is_told_what_the_tools_are(project: Project) -> None:
    quoted = 'A call looks like {"name": "shell_exec", "arguments": {"command": "ls"}} in JSON.'
    ran = run_here(project, [Reply(text=quoted), FINISH])
    first, written = replies(project)[0]
    assert not first.tool_calls
    assert written is None
    told = ran.chat_requests()[1]["messages"][-1]
    assert told["role"] == "user"
    assert "Your reply called no tool" in told["content"]
    assert "shell_exec" in told["content"]


def text_run(project: Project, script: Any, window: int = 4096, **sections: Any) -> Any:
    return run_here(project, script, window, llm={"tool_protocol": "text"}, **sections)


def test_the_text_protocol_sends_no_tools_and_reads_each_action(project: Project) -> None:
    inbox.post(project.state, "Write hi to a.txt.")  # a second user message in a row
    ran = text_run(
        project,
        [
            Reply(text="I will write a file.\n```bash\necho hi > a.txt\n```"),
            Reply(text="Hmm, let me think about it."),
            Reply(text="```bash\nls\n```\n```bash\npwd\n```"),
            TEXT_FINISH,
        ],
    )
    assert ran.returncode == 0, ran.stderr
    assert (project.workspace / "a.txt").read_text() == "hi\n"
    bodies = ran.chat_requests()
    assert all("tools" not in b and roles(b) <= {"system", "user", "assistant"} for b in bodies)
    for body in bodies:  # one role a turn: user messages in a row are joined
        turns = [m["role"] for m in body["messages"]]
        assert all(a != b for a, b in zip(turns, turns[1:], strict=False)), turns
    assert "Write hi to a.txt." in bodies[0]["messages"][1]["content"]
    # Each request starts with the one before it, as sent: the server's prompt cache holds.
    for before, after in zip(bodies, bodies[1:], strict=False):
        assert after["messages"][: len(before["messages"])] == before["messages"]
    system = bodies[0]["messages"][0]["content"]
    for name in ("file_read", "file_write", "list_dir", "shell_exec", "finish"):
        assert f"## {name}\n" in system
    assert system.count("Example:\n```") == system.count("\n## ")  # every tool has one
    # The reply as written, its result as the next user message.
    second = bodies[1]["messages"]
    assert second[-2] == {
        "role": "assistant",
        "content": "I will write a file.\n```bash\necho hi > a.txt\n```",
    }
    assert second[-1]["role"] == "user"
    assert second[-1]["content"].startswith("[shell_exec result]")
    # A reply without an action is told the tools, with an example in the protocol's form; one
    # with two runs the first and is told the other did not run.
    assert "called no tool" in bodies[2]["messages"][-1]["content"]
    assert "a file changes only through file_write" in bodies[2]["messages"][-1]["content"]
    # Sent back as written: the call that ran is in it, not added again.
    assert bodies[3]["messages"][-2]["content"] == "```bash\nls\n```\n```bash\npwd\n```"
    ran_last = bodies[3]["messages"][-1]["content"]
    assert ran_last.count("[shell_exec result]") == 1
    assert ran_last.endswith(
        "Your last reply wrote 2 tool calls; only the first ran. Write one "
        "call a reply, the next once you have seen its result."
    )
    formats = [written for _, written in replies(project)]
    assert formats == ["bash", None, "bash", "json_action"]
    assert ran.stdout.strip().endswith("run stopped: finish (done)")


@pytest.mark.slow
def test_text_steps_are_masked_and_carried_over_as_native_ones(project: Project) -> None:
    """A small window: old results become placeholders (in the user messages that bring them
    back), the newest never; a session restarted at its turn limit opens with its last step,
    reply and result together."""
    (project.workspace / "big.txt").write_text(
        "\n".join(f"line {i} of a long file" for i in range(1000))
    )
    turns = iter(range(10**6))

    def agent(body: dict[str, Any]) -> Reply:
        n = next(turns)
        return Reply(
            text=f"Reading part {n}.\n```bash\nsed -n '{n * 60 + 1},{n * 60 + 60}p' big.txt\n```"
        )

    ran = text_run(
        project,
        Scripted(agent),
        window=4096,
        supervisor={"max_total_turns": 20},
        session={"max_turns": 12},
    )
    bodies = ran.chat_requests()
    assert all(roles(b) <= {"system", "user", "assistant"} for b in bodies)
    masked = [
        m["content"] for b in bodies for m in b["messages"] if "result masked" in m["content"]
    ]
    assert masked, "no result was masked"
    assert all(m.startswith("[shell_exec result masked:") for m in masked)
    assert bodies[-1]["messages"][-1]["content"].startswith("[shell_exec result]")
    records = JsonlReader(project.state / "journal.jsonl").records(JOURNAL_RECORD)
    restarts = [r for r in records if isinstance(r, SessionStart) and r.session > 1]
    assert restarts, "the session never restarted"
    carried = restarts[0].messages[2:]
    assert isinstance(carried[-1], ToolMessage)
    calls = {c.id for m in carried if isinstance(m, AssistantMessage) for c in m.tool_calls}
    assert {m.tool_call_id for m in carried if isinstance(m, ToolMessage)} == calls


def test_auto_stays_native_for_calls_written_as_text(project: Project) -> None:
    """The reader reads them in the native protocol too: nothing to switch for, and a switch
    would change every prompt's start and the form the model sees its calls in."""
    script = Scripted([Reply(text=HERMES_LS)] * 4 + [FINISH])
    ran = run_here(project, script, llm={"tool_protocol": "auto"})
    assert ran.returncode == 0, ran.stderr
    assert ["tools" in b for b in ran.chat_requests()] == [True] * 5
    assert not [e for e in project.events("warning") if "text protocol" in e["message"]]
    assert [written for _, written in replies(project)][:4] == ["hermes"] * 4


def test_auto_stays_text_on_resume(project: Project) -> None:
    """Gone over to text (here: the template could not render tools), a resumed run stays text
    even where the server would now take tools: the switch is journalled."""
    script = Scripted([Reply(text="```bash\nls\n```")] * 6)
    auto = {"tool_protocol": "auto"}
    run_here(project, script, renders_tools=False, llm=auto, supervisor={"max_total_turns": 3})
    resumed = run_here(project, script, llm=auto, supervisor={"max_total_turns": 6})
    assert resumed.returncode == 0, resumed.stderr
    assert ["tools" in b for b in script.requests] == [False] * 6
    warnings = [e for e in project.events("warning") if "text protocol" in e["message"]]
    assert len(warnings) == 1


def test_auto_is_text_from_the_start_where_the_template_cannot_render_tools(
    project: Project,
) -> None:
    """llama-server says (`/props`) the model's template drops tool schemas: native calls
    cannot happen, so `auto` starts in text, saying why."""
    script = Scripted([Reply(text="```bash\nls\n```"), TEXT_FINISH])
    ran = run_here(project, script, renders_tools=False, llm={"tool_protocol": "auto"})
    assert ran.returncode == 0, ran.stderr
    assert ["tools" in b for b in script.requests] == [False, False]
    (switched,) = [e for e in project.events("warning") if "text protocol" in e["message"]]
    assert "cannot render tools" in switched["message"]
