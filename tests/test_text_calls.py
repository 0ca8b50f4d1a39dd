"""The text protocol (`model/text_calls.py`): its action blocks, its tools described, and the
conversation on the wire. What a reply calls in any form: `test_reply_reader.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ouroboros.ground.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage
from ouroboros.model.text_calls import (
    Action,
    FormatProblem,
    fences,
    names,
    read_action,
    text_wire,
    tools_section,
)
from ouroboros.model.tool_protocol import calls_written
from ouroboros.tools import ToolCaps, ToolRunner
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in

TOOLS = ["file_read", "file_write", "list_dir", "shell_exec", "finish"]
READ = {"path": "NOTES.md"}


def action(text: str) -> tuple[str, str, dict[str, object]]:
    found = read_action(text, TOOLS)
    assert isinstance(found, Action), found
    return found.format, found.call.name, json.loads(found.call.arguments)


def test_a_bash_block_runs_its_command_in_the_shell() -> None:
    text = "I will look around.\n```bash\nls -la\ncat NOTES.md\n```\nThen decide."
    assert action(text) == ("bash", "shell_exec", {"command": "ls -la\ncat NOTES.md"})
    assert action("```sh\npwd\n```")[2] == {"command": "pwd"}


def test_a_json_block_calls_any_tool() -> None:
    text = (
        'Saving.\n```json\n{"tool": "file_write", "arguments": {"path": "a", "content": "b"}}\n```'
    )
    assert action(text) == ("json_action", "file_write", {"path": "a", "content": "b"})


def test_other_code_blocks_are_no_actions() -> None:
    text = "Here is the code:\n```python\nprint(1)\n```\n```bash\npython a.py\n```"
    assert action(text)[2] == {"command": "python a.py"}


def test_a_reply_cut_off_in_an_open_block_runs_none_of_it() -> None:
    """What the model was about to write is unknown: the block it closed first is not run."""
    both = "```bash\nls\n```\n```bash\nrm -rf bui"
    cut_off = FormatProblem("no action it finished: it was cut off at the output limit")
    assert read_action(both, TOOLS, cut_off=True) == cut_off
    assert isinstance(read_action(both, TOOLS), FormatProblem)
    assert read_action("```bash\nrm -rf bui", TOOLS) == FormatProblem("no action block")
    assert action("```bash\nls\n```\nThen I will") == ("bash", "shell_exec", {"command": "ls"})


def test_a_reply_ends_at_a_stop_token_the_server_left_in_it() -> None:
    """A base model behind a ChatML fallback writes `<|im_end|>` and makes up the next turns."""
    text = "```bash\nls\n```<|im_end|>\n<|im_start|>user\nok<|im_end|>\n```bash\npwd\n```"
    assert action(text)[2] == {"command": "ls"}


def test_a_call_in_a_recovery_format_is_an_action_too() -> None:
    text = '<tool_call>{"name": "list_dir", "arguments": {}}</tool_call>'
    assert action(text) == ("hermes", "list_dir", {})


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("I think I should list the files.", "no action block"),
        ("```bash\nls\n```\n```bash\npwd\n```", "2 action blocks (none was run)"),
        ("```bash\n\n```", "an empty bash block"),
        ("```json\n{not json}\n```", "a json block that is not one JSON object (each key once)"),
        ('```json\n{"tool": "python", "arguments": {}}\n```',
         "a json block naming no tool there is ('python')"),
        ('```json\n{"tool": "list_dir", "arguments": "."}\n```',
         'a json block that is not {"tool": ..., "arguments": {...}}'),
    ],
)  # fmt: skip
def test_a_reply_without_exactly_one_action_says_what_is_wrong(text: str, problem: str) -> None:
    assert read_action(text, TOOLS) == FormatProblem(problem)


def test_a_native_call_is_shown_as_the_action_it_was_after_a_switch_to_text() -> None:
    """Replies from before `auto` went over to text hold calls not written in their text."""
    schemas = [
        {"function": {"name": n, "parameters": {"properties": {}, "required": []}}} for n in TOOLS
    ]
    native = AssistantMessage(
        content="Listing.",
        tool_calls=(ToolCall(id="a", name="shell_exec", arguments='{"command": "ls"}'),),
    )
    written = AssistantMessage(
        content="```bash\nls\n```",
        tool_calls=(ToolCall(id="b", name="shell_exec", arguments='{"command": "ls"}'),),
    )
    result = ToolMessage(tool_call_id="a", name="shell_exec", content="exit code 0\n")
    sent = text_wire(
        [SystemMessage(content="Go."), native, result, written], schemas, calls_written
    )
    assert [m.kind for m in sent] == ["system", "assistant", "user", "assistant"]
    assert sent[1].content == "Listing.\n\n```bash\nls\n```"
    assert sent[2].content == "[shell_exec result]\nexit code 0\n"
    assert sent[3].content == "```bash\nls\n```"
    assert "## finish\n" in sent[0].content


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
        found = read_action(f"```{example.language}\n{example.body}\n```", names(schemas))
        assert isinstance(found, Action), (function["name"], found)
        assert found.call.name == function["name"]
        runner.tools[function["name"]].args.model_validate_json(found.call.arguments)
    runner.close()
