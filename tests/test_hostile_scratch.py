"""What a command gets from the harness besides the workspace (issue 20, rows 20, 21, 22): a
private temporary folder nobody could prepare for it, an environment without the harness's
secrets, and a refusal in one line of a command too long to run. Through the real CLI against
the scripted loopback server."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ouroboros.scripted import Reply, ScriptedServer, tool
from ouroboros.tools.scratch import PREFIX
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


def test_the_private_temporary_folder_is_fresh_private_and_removed(project: Project) -> None:
    system_tmp = Path(tempfile.gettempdir())
    before = {p.name for p in system_tmp.glob(f"{PREFIX}*")}
    # What an agent (or another user) could prepare: the folder the previous scheme named.
    run_commands(project, 'stat -c "%a %U" "$TMPDIR"; echo "$TMPDIR"; touch "$TMPDIR/left"')
    [result] = shell_results(project)
    mode_owner, folder = result["content"].splitlines()[1:3]
    assert mode_owner == "700 root" or mode_owner.startswith("700 ")
    assert Path(folder).name.startswith(PREFIX)
    assert not Path(folder).exists(), "the run's temporary folder was left behind"
    assert {p.name for p in system_tmp.glob(f"{PREFIX}*")} <= before
    tools_event = next(e for e in project.events("tools"))
    assert tools_event["tmp"] == folder


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


def test_the_environment_is_not_the_harness_one(project: Project) -> None:
    """The whole environment the command saw is a subset of the allow-list and TMPDIR."""
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
        "TMPDIR", "TMP", "TEMP", "PWD", "SHLVL", "_", "OLDPWD",
    }  # fmt: skip
    extra = {n for n in names if n not in allowed and not n.startswith(allowed_prefixes)}
    assert not extra, f"commands inherited {sorted(extra)}"
    assert os.environ.get("HOME") is None or "HOME" in names
