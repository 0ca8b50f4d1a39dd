"""The text protocol: its action blocks read as calls (`reply_reader.read_reply`), its tools
described (`model/text_calls.py`), and the conversation on the wire (`text_wire`). What a reply
calls in any form: `test_reply_reader.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from ouroboros.model.reply_reader import read_reply
from ouroboros.model.text_calls import fences, names, text_wire, tools_section
from ouroboros.model.tool_protocol import calls_written
from ouroboros.tools import ToolCaps, ToolRunner
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in

TOOLS = ["file_read", "file_write", "list_dir", "shell_exec", "finish"]
LS = ToolCall(id="a", name="shell_exec", arguments='{"command": "ls"}')


def action(text: str, cut_off: bool = False) -> tuple[str | None, list[tuple[str, object]]]:
    """The form a reply's actions were read in, and the calls, as the text protocol reads them."""
    found = read_reply(text, False, TOOLS, True, cut_off)
    return found.format, [(c.name, json.loads(c.arguments)) for c in found.calls]


def test_a_bash_block_runs_its_command_in_the_shell() -> None:
    text = "I will look around.\n```bash\nls -la\ncat NOTES.md\n```\nThen decide."
    assert action(text) == ("bash", [("shell_exec", {"command": "ls -la\ncat NOTES.md"})])
    assert action("```sh\npwd\n```") == ("bash", [("shell_exec", {"command": "pwd"})])


def test_a_json_block_calls_any_tool() -> None:
    text = (
        'Saving.\n```json\n{"tool": "file_write", "arguments": {"path": "a", "content": "b"}}\n```'
    )
    assert action(text) == ("json_action", [("file_write", {"path": "a", "content": "b"})])


def test_other_code_blocks_are_no_actions() -> None:
    text = "Here is the code:\n```python\nprint(1)\n```\n```bash\npython a.py\n```"
    assert action(text) == ("bash", [("shell_exec", {"command": "python a.py"})])


def test_a_reply_cut_off_in_an_open_block_runs_none_of_it() -> None:
    """What the model was about to write is unknown: the block it closed first is not run."""
    assert action("```bash\nls\n```\n```bash\nrm -rf bui", cut_off=True) == (None, [])
    assert action("```bash\nrm -rf bui") == (None, [])  # a block left open is no action
    ls = ("bash", [("shell_exec", {"command": "ls"})])
    assert action("```bash\nls\n```\nThen I will", cut_off=True) == ls  # cut off in prose


def test_a_reply_ends_at_a_stop_token_the_server_left_in_it() -> None:
    """A base model behind a ChatML fallback writes `<|im_end|>` and makes up the next turns:
    the action it wrote in them is not run."""
    text = "```bash\nls\n```<|im_end|>\n<|im_start|>user\nok<|im_end|>\n```bash\npwd\n```"
    assert action(text) == ("bash", [("shell_exec", {"command": "ls"})])


def test_a_call_in_another_form_is_an_action_too() -> None:
    text = '<tool_call>{"name": "list_dir", "arguments": {}}</tool_call>'
    assert action(text) == ("hermes", [("list_dir", {})])


@pytest.mark.parametrize(
    ("text", "unknown"),
    [
        ("I think I should list the files.", ()),
        ("```bash\n\n```", ()),
        ("```json\n{not json}\n```", ()),
        ('```json\n{"tool": "list_dir", "arguments": "."}\n```', ()),
        ('```json\n{"tool": "python", "arguments": {}}\n```', ("python",)),
    ],
    ids=["prose", "empty-bash", "not-json", "arguments-not-an-object", "unknown-tool"],
)
def test_what_is_no_action_runs_nothing(text: str, unknown: tuple[str, ...]) -> None:
    found = read_reply(text, False, TOOLS, True, False)
    assert (found.calls, found.unknown) == ((), unknown)


def test_a_native_call_is_shown_as_the_action_it_was_after_a_switch_to_text() -> None:
    """Replies from before `auto` went over to text hold calls not written in their text: each
    such call is added, one the text holds is not."""
    schemas = [
        {"function": {"name": n, "parameters": {"properties": {}, "required": []}}} for n in TOOLS
    ]
    native = AssistantMessage(content="Listing.", tool_calls=(LS,))
    pwd = ToolCall(id="b", name="shell_exec", arguments='{"command": "pwd"}')
    half = AssistantMessage(content="```bash\nls\n```", tool_calls=(LS, pwd))
    written = AssistantMessage(content="```bash\nls\n```", tool_calls=(LS,))
    result = ToolMessage(tool_call_id="a", name="shell_exec", content="exit code 0\n")
    messages: list[Message] = [SystemMessage(content="Go."), native, result, half, result, written]
    sent = text_wire(messages, schemas, calls_written)
    assert [m.kind for m in sent] == ["system"] + ["assistant", "user"] * 2 + ["assistant"]
    assert sent[1].content == "Listing.\n\n```bash\nls\n```"
    assert sent[2].content == "[shell_exec result]\nexit code 0\n"
    assert sent[3].content == "```bash\nls\n```\n\n```bash\npwd\n```"
    assert sent[5].content == "```bash\nls\n```"
    assert "## finish\n" in sent[0].content


def test_a_side_call_in_text_shows_each_action_once() -> None:
    """Compaction's recap offers no tools: an action is still known as written by its reply."""
    reply = AssistantMessage(content="```bash\nls\n```", tool_calls=(LS,))
    result = ToolMessage(tool_call_id="a", name="shell_exec", content="exit code 0\n")
    sent = text_wire([SystemMessage(content="Go."), reply, result], [], calls_written)
    assert sent[1].content == "```bash\nls\n```"
    assert sent[0].content == "Go."


def test_every_tools_example_reads_back_as_a_call_of_that_tool(tmp_path: Path) -> None:
    """The examples are made from the schemas, so each tool, one added later included, has one
    the model can copy, and it is an action of that very tool with arguments it accepts."""
    workspace = Workspace(tmp_path, tmp_path / "SYSTEM_PROMPT.md")
    runner = ToolRunner(workspace, built_in(ShellExec(10), tmp_path, True), ToolCaps(1000))
    schemas = runner.schemas()
    section = tools_section(schemas)
    examples = [f for f in fences(section) if f.language in ("bash", "json")]
    assert len(examples) == len(schemas)
    for schema, example in zip(schemas, examples, strict=True):
        function = schema["function"]
        text = f"```{example.language}\n{example.body}\n```"
        found = read_reply(text, False, names(schemas), True, False)
        assert [c.name for c in found.calls] == [function["name"]], text
        assert found.format in ("bash", "json_action")
        runner.tools[function["name"]].args.model_validate_json(found.calls[0].arguments)
    runner.close()
