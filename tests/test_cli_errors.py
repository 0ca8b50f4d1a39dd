"""What a newcomer gets wrong, and the one line that says what to fix: no traceback, nothing
created or left behind that was not asked for."""

from __future__ import annotations

import os

import pytest

from ouroboros.model.scripted import Reply, ScriptedServer
from tests.conftest import Project

CLOSED = "http://127.0.0.1:9/v1"
"""Nothing listens there (port 9, discard): a run that got as far as the server would retry."""


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_a_missing_system_prompt_is_said_before_any_call(project: Project) -> None:
    (project.root / "SYSTEM_PROMPT.md").unlink()
    with ScriptedServer([Reply(text="hi")]) as server:
        project.configure(server.url)
        result = project.run("run", timeout=30)
        requests = server.requests
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "SYSTEM_PROMPT.md" in line
    assert "instructions are missing" in line
    assert "paths.system_prompt" in line
    assert requests == []  # not even discovery


def test_an_unwritable_state_folder_is_one_line(project: Project) -> None:
    project.configure(CLOSED)
    (project.root / "taken").write_text("a file where the state folder should go\n")
    env = {"OUROBOROS_PATHS__STATE_DIR": str(project.root / "taken" / "state")}
    result = project.run("run", env=env, timeout=30)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "cannot write" in line
    assert "taken" in line
    assert "paths.state_dir" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere: no EACCES to provoke")
def test_a_state_folder_without_write_permission_is_one_line(project: Project) -> None:
    project.configure(CLOSED)
    locked = project.root / "locked"
    locked.mkdir(mode=0o500)
    env = {"OUROBOROS_PATHS__STATE_DIR": str(locked / "state")}
    result = project.run("run", env=env, timeout=30)
    assert result.returncode == 1
    assert "cannot write" in one_line(result.stderr)


def test_report_of_no_run_creates_nothing(project: Project) -> None:
    project.configure(CLOSED)
    missing = project.root / "nowhere" / ".ouroboros"
    result = project.run("report", "--state", str(missing))
    assert result.returncode == 1
    assert f"no run in {missing}" in one_line(result.stderr)
    assert not missing.parent.exists()


def test_a_bad_environment_variable_is_named_not_the_file(project: Project) -> None:
    project.configure(CLOSED)
    env = {"OUROBOROS_CONTEXT__SOFT_THRESHOLD": "lots"}
    result = project.run("run", env=env)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "OUROBOROS_CONTEXT__SOFT_THRESHOLD" in line
    assert "config.toml" not in line
    assert "'lots'" in line


def test_compact_with_no_run_is_refused_and_leaves_nothing(project: Project) -> None:
    project.configure(CLOSED)
    result = project.run("compact")
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "no run is running" in line
    assert "python -m ouroboros run" in line
    assert not (project.state / "compact").exists()


@pytest.mark.parametrize(
    "command", ["run", "tell", "pause", "resume", "compact", "tail", "status", "report", "demo"]
)
def test_each_command_says_what_it_does_with_an_example(project: Project, command: str) -> None:
    result = project.run(command, "--help")
    assert result.returncode == 0
    assert "example:" in result.stdout
    assert f"python -m ouroboros {command}" in result.stdout


def test_the_top_help_is_for_users(project: Project) -> None:
    text = project.run("--help").stdout
    assert "examples:" in text
    for command in (
        "run",
        "tell",
        "pause",
        "resume",
        "compact",
        "tail",
        "status",
        "report",
        "demo",
    ):
        assert f"\n    {command} " in text or f"\n  {command} " in text or f"{{{command}" in text
    assert "Nothing runs on import" not in text


def test_no_server_at_the_url_says_what_to_start(project: Project) -> None:
    """Every retry says it, and the run that gives up ends with it: the URL, and what to start
    (or which setting to change)."""
    project.configure(CLOSED, llm={"retry_for_s": 1, "retry_initial_s": 0.1, "retry_max_s": 0.2})
    result = project.run("run", timeout=60)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "gave up on the model server" in last
    assert f"cannot reach a model server at {CLOSED}" in last
    assert "start it (for Ollama: `ollama serve`) or set llm.base_url" in last
    assert "Traceback" not in result.stderr
    # Said once (on stderr, as every fatal error): the terminal's last line only says the end.
    assert (result.stdout + result.stderr).count("gave up on the model server") == 1
    assert result.stdout.rstrip().endswith(" run stopped: error")
