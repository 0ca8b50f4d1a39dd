"""The built-in tools: workspace confinement, timeouts that kill whole process groups, refusals."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from ouroboros.ground.messages import ToolCall
from ouroboros.tools import ToolCaps, ToolOutcome, ToolRunner
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.tool import Output, Tool, ToolArgs, ToolContext, ToolFailed
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in
from tests.conftest import wait_for


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[ToolRunner]:
    (tmp_path / "ws").mkdir()
    (tmp_path / "SYSTEM_PROMPT.md").write_text("prompt")
    (tmp_path / "secret.txt").write_text("secret")
    workspace = Workspace(tmp_path / "ws", tmp_path / "SYSTEM_PROMPT.md")
    tools = ToolRunner(workspace, built_in(ShellExec(2.0), None, True), ToolCaps(2000))
    yield tools
    tools.close()


def call(runner: ToolRunner, name: str, **arguments: object) -> ToolOutcome:
    tool_call = ToolCall(id="c1", name=name, arguments=json.dumps(arguments))
    return anyio.run(runner.run, tool_call)


@pytest.mark.parametrize(
    "path", ["../secret.txt", "/etc/passwd", "sub/../../secret.txt", "~/x", "\x00"]
)
def test_paths_outside_the_workspace_are_refused(runner: ToolRunner, path: str) -> None:
    for name, extra in (("file_read", {}), ("file_write", {"content": "x"}), ("list_dir", {})):
        outcome = call(runner, name, path=path, **extra)
        assert outcome.error is not None, (name, path)
        assert outcome.message.content.startswith("error:")
    assert (runner.workspace.root.parent / "secret.txt").read_text() == "secret"


@pytest.mark.parametrize(
    ("path", "meant"),
    [("/workspace/todo.txt", "todo.txt"), ("/srv/app/workspace/src/a.py", "src/a.py"),
     ("../notes.md", "notes.md")],
)  # fmt: skip
def test_a_path_outside_is_refused_naming_the_path_inside_it_likely_meant(
    runner: ToolRunner, path: str, meant: str
) -> None:
    """The real small model wrote `/workspace/todo.txt` six times in a row, each refusal naming
    the workspace's absolute path; it is told the relative path instead, and shown no folder."""
    said = call(runner, "file_write", path=path, content="x").message.content
    told = f"{path!r} is outside the workspace: paths are relative to it, as {meant!r}"
    assert said == f"error: {told}"
    assert str(runner.workspace.root.parent) not in said


def test_symlink_pointing_out_is_refused(runner: ToolRunner) -> None:
    (runner.workspace.root / "link").symlink_to(runner.workspace.root.parent)
    (runner.workspace.root / "file-link").symlink_to(runner.workspace.root.parent / "secret.txt")
    assert (
        "outside the workspace" in call(runner, "file_read", path="link/secret.txt").message.content
    )
    assert "outside the workspace" in call(runner, "file_read", path="file-link").message.content
    assert call(runner, "file_write", path="link/new.txt", content="x").error
    assert not (runner.workspace.root.parent / "new.txt").exists()


def test_system_prompt_is_reachable(runner: ToolRunner) -> None:
    outcome = call(runner, "file_write", path="../SYSTEM_PROMPT.md", content="improved")
    assert outcome.error is None
    assert runner.workspace.system_prompt.read_text() == "improved"
    by_absolute = call(runner, "file_read", path=str(runner.workspace.system_prompt))
    assert by_absolute.message.content == "improved"


def test_file_tools_round_trip(runner: ToolRunner) -> None:
    lines = "\n".join(f"line {i}" for i in range(1, 11))
    assert call(runner, "file_write", path="a/b.txt", content=lines).error is None
    window = call(runner, "file_read", path="a/b.txt", offset=3, limit=2).message.content
    assert window == "line 3\nline 4\n[lines 3-4 of 10; read more with offset=5]"
    assert call(runner, "list_dir", path="a").message.content == "b.txt  70 bytes"
    assert "no such file" in call(runner, "file_read", path="missing.txt").message.content


def test_shell_exec_reports_exit_code_and_output(runner: ToolRunner) -> None:
    outcome = call(runner, "shell_exec", command="echo out; echo err >&2; exit 4")
    assert outcome.message.exit_code == 4
    assert outcome.message.content == "exit code 4\nout\nerr\n"


@pytest.mark.slow
def test_timeout_kills_the_whole_process_group(runner: ToolRunner, tmp_path: Path) -> None:
    pid_file = runner.workspace.root / "child.pid"
    outcome = call(
        runner, "shell_exec", command=f"sleep 60 & echo $! > {pid_file}; sleep 60", timeout_s=1
    )
    assert "timed out after 1 s" in outcome.message.content
    child = int(pid_file.read_text())
    wait_for(lambda: not _alive(child), timeout=5)
    assert not _alive(child), "the background child survived the timeout"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def test_large_output_is_capped_and_spilled(runner: ToolRunner) -> None:
    outcome = call(runner, "shell_exec", command="seq 1 20000")
    content = outcome.message.content
    assert len(content.encode()) <= 2000
    assert content.startswith("exit code 0\n1\n2\n")
    assert content.rstrip().endswith("20000")
    assert outcome.original_bytes > 100_000
    spilled = next((runner.workspace.root / ".outputs").iterdir())
    assert f"Full output: .outputs/{spilled.name}" in content
    assert spilled.read_text().endswith("19999\n20000\n")


def test_blocked_command_never_runs(runner: ToolRunner) -> None:
    marker = runner.workspace.root / "ran"
    outcome = call(runner, "shell_exec", command=f"touch {marker}; sudo true")
    assert outcome.blocked == "sudo"
    assert not marker.exists()


def test_lone_surrogate_is_refused_and_nothing_is_lost(runner: ToolRunner) -> None:
    notes = runner.workspace.root / "NOTES.md"
    notes.write_text("precious notes")
    raw = '{"path": "NOTES.md", "content": "updated notes \\ud83d"}'
    outcome = anyio.run(runner.run, ToolCall(id="c1", name="file_write", arguments=raw))
    assert "lone surrogate" in outcome.message.content
    assert notes.read_text() == "precious notes"
    bad_path = '{"path": "\\ud83d.md"}'
    outcome = anyio.run(runner.run, ToolCall(id="c2", name="file_read", arguments=bad_path))
    assert outcome.error is not None


class EchoArgs(ToolArgs):
    """Say `text` back."""

    text: str


class Echo(Tool):
    name, args = "echo", EchoArgs

    async def run(self, args: EchoArgs, context: ToolContext) -> Output:
        if not args.text:
            raise ToolFailed("give a text to say back")
        return Output(args.text)


def test_a_new_tool_is_one_class_offered_and_run_as_the_built_in_ones(tmp_path: Path) -> None:
    """Listed after the built-in tools, its schema is made from its arguments' model as theirs
    are, and its failures and bad arguments are results like theirs."""
    workspace = Workspace(tmp_path, tmp_path / "SYSTEM_PROMPT.md")
    runner = ToolRunner(workspace, [*built_in(ShellExec(2.0), None, True), Echo()], ToolCaps(2000))
    properties = {"text": {"type": "string"}}
    parameters = {"properties": properties, "required": ["text"], "type": "object"}
    function = {"name": "echo", "description": "Say `text` back.", "parameters": parameters}
    assert runner.schemas()[-1] == {"type": "function", "function": function}
    assert call(runner, "echo", text="hi").message.content == "hi"
    assert call(runner, "echo", text="").message.content == "error: give a text to say back"
    assert call(runner, "echo").message.content.startswith("error: bad arguments for echo: text:")
    runner.close()
