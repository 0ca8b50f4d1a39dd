"""What a command gets from the harness besides the workspace (issue 20, rows 20, 21, 22): a
private temporary folder nobody could prepare for it, an environment without the harness's
secrets, and a refusal in one line of a command too long to run. Through the real CLI against
the scripted loopback server."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from ouroboros.ground.messages import ToolCall
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.tools import ToolCaps, ToolRunner, sandbox
from ouroboros.tools.environment import PREFIX
from ouroboros.tools.processes import Processes
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in
from tests.conftest import Project


def shell_results(project: Project) -> list[dict[str, Any]]:
    records = project.records("journal.jsonl")
    return [
        r["message"]
        for r in records
        if r.get("kind") == "message" and r["message"].get("name") == "shell_exec"
    ]


def run_commands(project: Project, *commands: str, env: dict[str, str] | None = None) -> str:
    script = [Reply(tool_calls=[tool("shell_exec", command=c)]) for c in commands]
    with ScriptedServer(script) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", str(len(commands)), env=env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


@pytest.mark.slow
def test_commands_do_not_see_the_harness_secrets(project: Project) -> None:
    secrets = {
        "OUROBOROS_LLM__API_KEY": "sk-ouroboros-secret",
        "OPENAI_API_KEY": "sk-openai-secret",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
        "LC_ALL": "C.UTF-8",
    }
    run_commands(project, "env", env=secrets)
    [result] = shell_results(project)
    seen = result["content"]
    for name in ("OUROBOROS_LLM__API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"):
        assert name not in seen
    assert "secret" not in seen
    assert "SSH_AUTH_SOCK" not in seen
    assert "LC_ALL=C.UTF-8" in seen  # an allowed pattern passes
    assert "PATH=" in seen
    assert "TMPDIR=" in seen


@pytest.mark.slow
def test_tools_env_lets_a_named_variable_through(project: Project) -> None:
    script = [Reply(tool_calls=[tool("shell_exec", command="echo [$MY_TOKEN] [$OTHER]")])]
    with ScriptedServer(script) as server:
        project.configure(server.url, tools={"env": ["PATH", "MY_*"]})
        result = project.run(
            "run", "--max-turns", "1", env={"MY_TOKEN": "given", "OTHER": "kept-out"}
        )
    assert result.returncode == 0, result.stderr
    [shown] = shell_results(project)
    assert "[given] []" in shown["content"]


@pytest.mark.slow
def test_the_private_temporary_folder_is_fresh_private_and_removed(project: Project) -> None:
    # What an agent (or another user) could prepare: the folder the previous scheme named.
    run_commands(project, 'stat -c "%a %U" "$TMPDIR"; echo "$TMPDIR"; touch "$TMPDIR/left"')
    [result] = shell_results(project)
    mode_owner, folder = result["content"].splitlines()[1:3]
    assert mode_owner == "700 root" or mode_owner.startswith("700 ")
    assert Path(folder).name.startswith(PREFIX)
    assert not Path(folder).exists(), "the run's temporary folder was left behind"
    # None other of the run's own (named after its pid; other runs may be going on meanwhile).
    run_pid = Path(folder).name.removeprefix(PREFIX).split("-")[0]
    assert not list(Path(folder).parent.glob(f"{PREFIX}{run_pid}-*"))
    tools_event = next(e for e in project.events("tools"))
    assert tools_event["tmp"] == folder


@pytest.mark.slow
def test_a_dead_runs_folder_is_swept_but_a_planted_link_is_not_followed(
    project: Project, tmp_path: Path
) -> None:
    system_tmp = Path(tempfile.gettempdir())
    dead_pid = 2**22 + 12345  # above pid_max's default: no such process
    stale = system_tmp / f"{PREFIX}{dead_pid}-abc"
    stale.mkdir()
    (stale / "junk").write_text("x")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    planted = system_tmp / f"{PREFIX}{dead_pid}-link"
    planted.symlink_to(victim)
    try:
        run_commands(project, "true")
        assert not stale.exists(), "a dead run's temporary folder was not swept"
        assert (victim / "keep").read_text() == "precious"
    finally:
        planted.unlink(missing_ok=True)


@pytest.mark.slow
def test_a_command_too_long_for_exec_is_refused_in_one_line(project: Project) -> None:
    marker = project.workspace / "ran"
    long_command = f"touch {marker}; echo " + "x" * 200_000
    run_commands(project, long_command, "echo after")
    first, second = shell_results(project)
    assert first["error"] is True
    assert first["content"].startswith("error: the command is 200,")
    assert "\n" not in first["content"].strip()
    assert "file_write" in first["content"]
    assert not marker.exists()
    assert second["content"].startswith("exit code 0\nafter")
    # Stored once, at the cap: the journal does not hold the 200 KB command twice in results.
    assert len(json.dumps(first)) < 200_000 + 2_000


@pytest.mark.slow
def test_the_environment_is_not_the_harness_one(project: Project) -> None:
    """The whole environment the command saw is a subset of the allow-list, TMPDIR and the
    harness's own PYTHONDONTWRITEBYTECODE (set, not inherited)."""
    run_commands(project, "env -0 > env.bin")
    names = {
        item.split("=", 1)[0]
        for item in (project.workspace / "env.bin").read_text().split("\0")
        if item
    }
    allowed_prefixes = ("LC_",)
    allowed = {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
        "COLUMNS", "LINES", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONIOENCODING",
        "TMPDIR", "TMP", "TEMP", "PWD", "SHLVL", "_", "OLDPWD", "PYTHONDONTWRITEBYTECODE",
    }  # fmt: skip
    extra = {n for n in names if n not in allowed and not n.startswith(allowed_prefixes)}
    assert not extra, f"commands inherited {sorted(extra)}"
    assert os.environ.get("HOME") is None or "HOME" in names


@pytest.mark.slow
def test_limits_above_the_machines_hard_limit_are_lowered_not_a_command_that_never_runs(
    project: Project,
) -> None:
    """A command without privileges cannot raise a hard limit: asked for more than the
    machine allows, every command would exit before it ran. The limit is lowered instead, and
    the run says so."""
    script = [Reply(tool_calls=[tool("shell_exec", command="echo ran")])]
    with ScriptedServer(script) as server:
        project.configure(server.url, tools={"max_memory_mb": 4096})
        lowered = 'ulimit -Sd 2000000 && ulimit -Hd 2000000 && exec "$0" -m ouroboros "$@"'
        result = subprocess.run(
            ["bash", "-c", lowered, sys.executable, "run", "--max-turns", "1"],
            cwd=project.root, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [shown] = shell_results(project)
    assert shown["content"].startswith("exit code 0\nran")
    warnings = [e["message"] for e in project.events("warning")]
    assert any("tools.max_memory_mb is lowered" in w for w in warnings), warnings


@pytest.mark.skipif(not sandbox.abi_version(), reason="this kernel has no Landlock")
def test_a_set_up_step_that_fails_is_named_not_a_bare_exit_code(tmp_path: Path) -> None:
    """A ruleset the kernel refuses (here: a descriptor that is no ruleset) makes every command
    exit before it runs: the probe at start and each result name the step."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    built = sandbox.build([workspace], [Path("/")], tmp_path / "state", True)
    built.close()
    refused = dataclasses.replace(built, fd=os.open("/dev/null", os.O_RDONLY), isolation=None)
    processes = Processes(refused, use_cgroup=False)
    try:
        assert processes.probe(workspace, {"PATH": os.environ["PATH"]}) == (
            "Landlock refused the ruleset"
        )
        runner = ToolRunner(
            Workspace(workspace, tmp_path / "SYSTEM_PROMPT.md"),
            built_in(ShellExec(5, processes), None, True),
            ToolCaps(4000),
        )
        call = ToolCall(id="c", name="shell_exec", arguments=json.dumps({"command": "true"}))
        outcome = anyio.run(runner.run, call)
        assert outcome.message.content == (
            "error: the command never ran: Landlock refused the ruleset (exit code 116)"
        )
    finally:
        processes.close()
