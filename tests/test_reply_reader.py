"""The reply reader (`model/reply_reader.py`): every form a call is written in becomes that call,
several calls run in order, near names are the tools they mean, an unknown tool is named with the
real ones, JSON that only quotes or holds data is no call; and what each reply is answered with.
The replies of a real model (Qwen2.5-Coder-0.5B-Instruct on llama-server, recorded by
`bench/real_tasks.py`) are read as the harness reads them: `tests/data/replies/`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ouroboros.model.reply_reader import answer, parameters_of, read_reply, tool_named
from ouroboros.model.text_calls import fences, reply_text
from ouroboros.tools import ToolCaps, ToolRunner
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in

TOOLS = ["file_read", "file_write", "list_dir", "shell_exec", "finish"]
READ = {"path": "NOTES.md"}
REPLIES = Path(__file__).parent / "data" / "replies"


def calls(text: str, cut_off: bool = False, text_protocol: bool = False) -> list[tuple[str, Any]]:
    found = read_reply(text, False, TOOLS, text_protocol, cut_off)
    return [(c.name, json.loads(c.arguments)) for c in found.calls]


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The built-in tools' real schemas."""
    root = tmp_path_factory.mktemp("ws")
    workspace = Workspace(root, root / "SYSTEM_PROMPT.md")
    runner = ToolRunner(workspace, built_in(ShellExec(10), root, True), ToolCaps(1000))
    try:
        return runner.schemas()
    finally:
        runner.close()


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ('<tool_call>\n{"name": "file_read", "arguments": {"path": "NOTES.md"}}\n</tool_call>',
         "hermes"),
        ('Let me look.\n<tool_call>{"name": "file_read", "parameters": {"path": "NOTES.md"}}'
         "</tool_call><|im_end|>", "hermes"),
        ('{"name": "file_read", "arguments": {"path": "NOTES.md"}}', "json"),
        ('I will read my notes.\n{"name": "file_read", "arguments": {"path": "NOTES.md"}}\n',
         "json"),
        ('{"name": "file_read", "arguments": "{\\"path\\": \\"NOTES.md\\"}"}', "json"),
        ('{"tool": "file_read", "args": {"path": "NOTES.md"}}', "json"),
        ('{"type": "function", "function": {"name": "file_read", "arguments": {"path": "NOTES.md"}'
         "}}", "json"),
        ('Reading.\n```json\n{"name": "file_read", "arguments": {"path": "NOTES.md"}}\n```',
         "fenced_json"),
        ('```\n{"name": "file_read", "parameters": {"path": "NOTES.md"}}\n```\n', "fenced_json"),
        ('[TOOL_CALLS][{"name": "file_read", "arguments": {"path": "NOTES.md"}}]', "mistral"),
        ('[TOOL_CALLS] {"name": "file_read", "arguments": {"path": "NOTES.md"}}</s>', "mistral"),
        ('[TOOL_CALLS]file_read[ARGS]{"path": "NOTES.md"}', "mistral"),
    ],
)  # fmt: skip
def test_each_form_becomes_the_call_it_writes_and_leaves_the_text(text: str, written: str) -> None:
    found = read_reply(text, False, TOOLS, False, False)
    assert found.format == written
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == [("file_read", READ)]
    assert "NOTES.md" not in found.text  # the call is kept once, as a call
    assert "```" not in found.text
    assert "<tool_call>" not in found.text
    # Where it is written, its tags and its block included: the text protocol puts a stand-in
    # there for a call too long to keep, and nothing of the call may stay beside it.
    (span,) = found.spans
    assert span.call == found.calls[0]
    read = reply_text(text)
    rest = read[: span.start] + read[span.end :]
    assert not [part for part in ("{", "```", "tool_call", "TOOL_CALLS") if part in rest], rest


def test_a_tools_name_beside_its_arguments_is_that_call() -> None:
    """The real model wrote `finish` this way, again and again, each answered "no call"."""
    text = '{\n    "name": "finish",\n    "summary": "Stop the run for good."\n}'
    found = read_reply(text, False, TOOLS, False, False)
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == [
        ("finish", {"summary": "Stop the run for good."})
    ]
    found = read_reply('{"tool": "file_read", "path": "NOTES.md"}', False, TOOLS, False, False)
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == [("file_read", READ)]


def test_several_calls_run_in_the_order_written_and_a_repeated_one_once() -> None:
    text = (
        '{"name": "list_dir", "arguments": {"path": "."}}\n'
        '{"name": "file_read", "arguments": {"path": "a"}}\n'
        '{"name": "list_dir", "arguments": {"path": "."}}\n'
        '<tool_call>{"name": "file_write", "arguments": {"path": "b", "content": "x"}}</tool_call>'
    )
    assert calls(text) == [
        ("list_dir", {"path": "."}),
        ("file_read", {"path": "a"}),
        ("file_write", {"path": "b", "content": "x"}),
    ]
    # Each place a call is written, the repeated one's both.
    spans = read_reply(text, False, TOOLS, False, False).spans
    assert [text[s.start : s.end] for s in spans] == text.splitlines()
    assert [s.call.name for s in spans] == ["list_dir", "file_read", "list_dir", "file_write"]


@pytest.mark.parametrize(
    ("written", "meant"),
    [("read", "file_read"), ("read_file", "file_read"), ("File-Read", "file_read"),
     ("file_raed", "file_read"), ("write", "file_write"), ("exec", "shell_exec"),
     ("shell", "shell_exec"), ("dir", "list_dir"), ("square", None), ("file", None),
     ("python", None)],
)  # fmt: skip
def test_a_near_name_is_the_one_tool_it_means(written: str, meant: str | None) -> None:
    assert tool_named(written, TOOLS) == meant


@pytest.mark.parametrize(
    ("text", "meant"),
    [
        ('{"name": "rename-function", "arguments": {"path": "cart.py", "offset": 12, "limit": 1}}',
         ("file_read", {"path": "cart.py", "offset": 12, "limit": 1})),
        ('{"name": "fix_bugs", "arguments": {"path": "stats.py", "content": "x = 1"}}',
         ("file_write", {"path": "stats.py", "content": "x = 1"})),
        ('{"name": "square", "arguments": {"x": 3}}', None),  # no tool takes `x`
        ('{"name": "delete", "arguments": {"path": "a.txt"}}', None),  # file_read or list_dir
        ('{"name": "nothing", "arguments": {}}', None),
    ],
)  # fmt: skip
def test_a_call_of_no_tools_name_is_the_one_tool_its_arguments_are_for(
    schemas: list[dict[str, Any]], text: str, meant: tuple[str, dict[str, Any]] | None
) -> None:
    tools = [s["function"]["name"] for s in schemas]
    found = read_reply(text, False, tools, False, False, parameters_of(schemas))
    if meant is None:
        assert not found.calls
        assert found.unknown
    else:
        assert [(c.name, json.loads(c.arguments)) for c in found.calls] == [meant]
        assert not found.unknown


def test_an_unknown_tool_is_not_run_and_named_beside_the_calls_that_are() -> None:
    text = '{"name": "square", "arguments": {"x": 3}}\n{"name": "list_dir", "arguments": {}}'
    found = read_reply(text, False, TOOLS, False, False)
    assert found.unknown == ("square",)
    assert [c.name for c in found.calls] == ["list_dir"]
    assert "square" in found.text  # the model's words about it stay: the answer speaks of them


@pytest.mark.parametrize(
    "text",
    [
        # malformed JSON
        '<tool_call>{"name": "file_read", "arguments": {"path": "a"}</tool_call>',
        '{"name": "file_read", "arguments": {"path": "a"',
        "```json\n{name: file_read}\n```",
        # arguments that are not an object
        '{"name": "file_read", "arguments": ["NOTES.md"]}',
        '<tool_call>{"name": "file_read", "arguments": "NOTES.md"}</tool_call>',
        # other keys: not a call object
        '{"name": "file_read", "arguments": {}, "then": "shell_exec"}',
        # JSON inside a sentence that quotes an example
        'To read a file you would send {"name": "file_read", "arguments": {"path": "a"}} to it.',
        # data, not calls: no tool named, or a name with nothing to call it with
        '{"path": "NOTES.md"}',
        '{"name": "shop", "port": 8000}',
        '{"name": "shop"}',
        # a near name beside keys of its own is data that has a name, not a call
        '{"name": "list", "items": ["milk", "bread"]}',
        # a repeated key or a constant JSON has not: which value was meant is unclear
        '{"name": "list_dir", "arguments": {}, "name": "shell_exec"}',
        '{"name": "file_read", "arguments": {"path": NaN}}',
        # not a call at all
        "I am done for now.",
        "```python\nprint(1)\n```",
    ],
)
def test_what_is_no_call_is_not_run(text: str) -> None:
    found = read_reply(text, False, TOOLS, False, False)
    assert not found.calls
    assert not found.unknown


def test_the_servers_own_calls_are_the_calls_and_the_text_is_not_read() -> None:
    text = '{"name": "shell_exec", "arguments": {"command": "rm -rf build"}}'
    assert not read_reply(text, True, TOOLS, False, False).calls


def test_a_bash_block_is_a_shell_call_when_no_json_call_is_written() -> None:
    assert calls("I will look.\n```bash\nls -la\n```") == [("shell_exec", {"command": "ls -la"})]
    both = '```bash\nls\n```\n{"name": "list_dir", "arguments": {}}'
    assert calls(both) == [("list_dir", {})]  # the call written as a call, not its neighbour


@pytest.mark.parametrize(
    "text",
    [
        "calc.py\n```python\ndef add(a, b):\n    return a + b\n```",
        "Here it is:\n\n**calc.py**\n\n```\ndef add(a, b):\n    return a + b\n```\nDone.",
        "`calc.py`:\n```python\ndef add(a, b):\n    return a + b\n```",
        "### ./calc.py\n```\ndef add(a, b):\n    return a + b\n```",
        "```calc.py\ndef add(a, b):\n    return a + b\n```",
        "```python calc.py\ndef add(a, b):\n    return a + b\n```",
        "```\ncalc.py\n```\n```python\ndef add(a, b):\n    return a + b\n```",
    ],
)  # fmt: skip
def test_a_block_its_path_names_is_that_files_whole_new_text(text: str) -> None:
    """The form a small coding model writes a change in when it writes no call: the path on the
    line before a fenced block, in its fence, or alone in a block just before it."""
    content = "def add(a, b):\n    return a + b\n"
    assert calls(text) == [("file_write", {"path": "calc.py", "content": content})]
    assert read_reply(text, False, TOOLS, False, False).format == "file_block"


@pytest.mark.parametrize(
    "text",
    [
        "```python\ndef add(a, b):\n    return a + b\n```",
        "Here is the updated `calc.py`:\n```python\ndef add(a, b):\n    return a + b\n```",
        "https://example.org/calc.py\n```\nx = 1\n```",
        "```\ncalc.py\n```\nThen this:\n```\nx = 1\n```",
    ],
)  # fmt: skip
def test_a_block_no_path_names_alone_is_not_written(text: str) -> None:
    """A block in a sentence about a file, or with no file named, is code the reply shows: which
    file it would replace is a guess, and a wrong guess loses that file's text."""
    assert calls(text) == []


def test_a_block_is_read_only_where_no_call_is_written_and_file_write_is_offered() -> None:
    block = "notes.txt\n```\nhello\n```"
    both = block + '\n{"name": "list_dir", "arguments": {}}'
    assert calls(both) == [("list_dir", {})]
    offered = [t for t in TOOLS if t != "file_write"]
    assert not read_reply(block, False, offered, False, False).calls
    then = "```bash\nls\n```\n" + block  # in the order written: the command runs first
    assert [name for name, _ in calls(then)] == ["shell_exec", "file_write"]


def test_what_a_reply_was_still_writing_at_the_output_limit_is_not_read() -> None:
    """A block left open, or reasoning left open: what the model was about to write is unknown.
    A call it finished before the cut is read."""
    open_block = '```json\n{"name": "file_write", "arguments": {"path": "a", "co'
    assert calls(open_block, cut_off=True) == []
    assert calls("```bash\nrm -rf bui", cut_off=True) == []
    assert calls('{"name": "list_dir", "arguments": {}}\n<think>and then', cut_off=True) == []
    finished = '{"name": "list_dir", "arguments": {}}\n{"name": "file_write", "argu'
    assert calls(finished, cut_off=True) == [("list_dir", {})]


def test_a_stop_token_ends_the_reply() -> None:
    made_up = 'Done.<|im_end|>\n<|im_start|>user\n{"name": "list_dir", "arguments": {}}'
    assert calls(made_up) == []


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>" * 100_000,
        '<tool_call>{"name": "list_dir", "arguments": {}}</tool_call> ' * 20_000 + "and so on",
        '{"a": [\n' * 130_000,
        "{\n" * 500_000,
        "[TOOL_CALLS]" + "[" * 1_000_000,
        "```\n" * 250_000,
        '{"name": "nope", "arguments": {}}\n' * 30_000,
    ],
    ids=["open-tags", "calls-then-prose", "open-objects", "braces", "deep-list", "fences", "many"],
)
@pytest.mark.slow
def test_a_reply_of_a_megabyte_made_to_be_slow_to_read_is_read_in_its_length(text: str) -> None:
    """A server may send megabytes (up to `llm.max_reply_bytes`): at most `MAX_CANDIDATES`
    places are tried, each read to its object's end; a repeated call runs once."""
    found = read_reply(text, False, TOOLS, False, False)
    assert len(found.calls) <= 1
    assert len(found.unknown) <= 64


# --- What a reply is answered with.


def test_an_unknown_tool_is_answered_with_the_tools_and_a_harmless_example(
    schemas: list[dict[str, Any]],
) -> None:
    told = answer("", False, ["square"], schemas, False, False, 512)
    assert told is not None
    assert "no tool `square`" in told
    for schema in schemas:
        assert schema["function"]["name"] in told
    example = json.loads(told.split("For example:\n")[1])
    assert example == {"name": "list_dir", "arguments": {"path": "."}}


def test_a_tool_named_after_the_task_is_told_so_and_shown_reads_of_the_tasks_files(
    schemas: list[dict[str, Any]],
) -> None:
    """The real model called `square` for "add a function `square(x)`", answered with the same
    words and `list_dir .` each time, eleven times in a row."""
    task = "Add a function `square(x)` to `mathlib.py`, as in notes/spec.md (see ../up.txt)."
    told = [answer("", False, ["square"], schemas, False, False, 512, n, task) for n in range(4)]
    assert all(t is not None and "`square` is in your task" in t for t in told)
    examples = [json.loads(str(t).split("For example:\n")[1]) for t in told]
    assert [e["arguments"] for e in examples] == [
        {"path": "mathlib.py"},
        {"path": "notes/spec.md"},
        {"path": "."},
        {"path": "mathlib.py"},
    ]
    file = answer("", False, ["notes/spec.md"], schemas, False, False, 512, 0, task)
    assert file is not None
    assert "`notes/spec.md` is in your task" in file
    other = answer("", False, ["frobnicate"], schemas, False, False, 512, 0, task)
    assert other is not None
    assert "in your task" not in other


def test_replies_without_a_call_in_a_row_are_told_in_other_words_and_shown_no_call_to_copy(
    schemas: list[dict[str, Any]],
) -> None:
    shown = [answer("Hello.", False, [], schemas, False, False, 512, streak) for streak in range(4)]
    assert len(set(shown)) == 2, shown  # the same words again teach a copying model nothing
    first = shown[0]
    assert first is not None
    assert "called no tool" in first
    assert "a file changes only through file_write or shell_exec" in first
    for text in shown:
        assert text is not None
        assert "file_read, file_write, list_dir, shell_exec" in text
        assert '"arguments": {"' not in text  # no call to copy as it is


def test_the_text_protocol_is_shown_its_own_form(schemas: list[dict[str, Any]]) -> None:
    told = answer("```json\n{}\n```", False, ["read"], schemas, True, False, 512)
    assert told is not None
    (block,) = fences(told)
    assert block.language == "json"
    assert json.loads(block.body) == {"tool": "list_dir", "arguments": {"path": "."}}


def test_a_reply_cut_off_is_told_so_where_it_was_cut(schemas: list[dict[str, Any]]) -> None:
    told = answer("I will now explain at length", False, [], schemas, False, True, 512)
    assert told is not None
    assert "before it called a tool" in told
    in_call = answer('```json\n{"name": "file_write", "arg', False, [], schemas, False, True, 512)
    assert in_call is not None
    assert "into a file_write call" in in_call
    assert answer("Reading.", True, [], schemas, False, False, 512) is None


# --- What a real small model wrote.


def recorded() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted(REPLIES.glob("*.jsonl")):
        with path.open() as lines:
            found.extend(json.loads(line) for line in lines if line.strip())
    return found


@pytest.mark.parametrize("reply", recorded(), ids=lambda r: str(r["what"]))
def test_a_real_models_reply_is_read_as_recorded(reply: dict[str, Any]) -> None:
    """Each recorded reply says what it shows (`what`), what its text holds and what the harness
    must make of it: the calls (name and arguments, in order), the unknown tools, and a phrase
    the answer holds; in the files protocol, the files the session showed (`files`)."""
    cut_off = reply["finish_reason"] == "length"
    files = reply.get("protocol") == "files"
    found = read_reply(
        reply["content"], False, reply["tools"], files, cut_off, files=reply.get("files")
    )
    assert [[c.name, json.loads(c.arguments)] for c in found.calls] == reply["calls"]
    assert list(found.unknown) == reply.get("unknown", [])
    schemas = [{"function": {"name": name, "parameters": {}}} for name in reply["tools"]]
    told = answer(
        found.text, bool(found.calls), found.unknown, schemas, files, cut_off, 512, files=files
    )
    if "told" in reply:
        assert told is not None
        assert reply["told"] in told, told


def test_what_follows_the_last_call_is_not_kept_in_the_conversation() -> None:
    """A small model goes on after its call with a result it makes up, or the same call to the
    output limit: sent back every turn, that would be copied and fill the window."""
    text = (
        'I will read it.\n{"name": "file_read", "arguments": {"path": "a"}}\n'
        "The file says hello.\n" + '{"name": "file_read", "arguments": {"path": "a"}\n' * 20
    )
    found = read_reply(text, False, TOOLS, False, True)
    assert [c.name for c in found.calls] == ["file_read"]
    assert found.text == "I will read it."
