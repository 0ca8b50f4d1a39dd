"""What a newcomer gets wrong, and the one line that says what to fix: no traceback, nothing
created or left behind that was not asked for."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from ouroboros.ground.state_folder import FORMER_UNPAUSE_REQUEST, UNPAUSE_REQUEST
from ouroboros.model.scripted import Reply, ScriptedServer
from ouroboros.tools import sandbox
from tests.conftest import PROJECT_ROOT, Project

pytestmark = pytest.mark.slow  # every test here runs `python -m ouroboros`

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
    assert result.returncode == 2  # a setup mistake: no service manager retries it
    line = one_line(result.stderr)
    assert "SYSTEM_PROMPT.md" in line
    assert "instructions are missing" in line
    assert "paths.system_prompt" in line
    assert requests == []  # not even discovery


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: p.write_text(" \n\n"), "is empty"),
        (lambda p: p.write_bytes(b"# Purpose\n\x00\x01\x02"), "is binary"),
        (lambda p: p.write_bytes(b"# Purpose\ncaf\xe9 au lait\n"), "not UTF-8 text"),
        (lambda p: p.unlink() or p.mkdir(), "a folder, not a file"),
    ],
    ids=["empty", "binary", "latin-1", "folder"],
)
def test_unusable_instructions_are_one_line_before_any_call(
    project: Project, make: Callable[[Path], object], said: str
) -> None:
    make(project.root / "SYSTEM_PROMPT.md")
    with ScriptedServer([Reply(text="hi")]) as server:
        project.configure(server.url)
        result = project.run("run", timeout=60)
        requests = server.requests
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert said in line, line
    assert "paths.system_prompt" in line
    assert requests == []


def test_the_templates_placeholder_purpose_is_warned_about(project: Project) -> None:
    template = (PROJECT_ROOT / "SYSTEM_PROMPT.md").read_text()
    (project.root / "SYSTEM_PROMPT.md").write_text(template)
    with ScriptedServer([Reply(text="hi")]) as server:
        project.configure(server.url, supervisor={"max_total_turns": 1})
        warned = project.run("run", timeout=60)
        (project.root / "SYSTEM_PROMPT.md").write_text(
            template.replace("# How you work", "Count the words in data/.\n\n# How you work")
        )
        filled = project.run("run", "--fresh", timeout=60)
    assert "the template's empty # Purpose" in warned.stderr
    assert filled.returncode == warned.returncode == 0, filled.stderr
    assert "# Purpose" not in filled.stderr


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
    "command", ["run", "tell", "pause", "unpause", "compact", "tail", "status", "report", "demo"]
)
def test_each_command_says_what_it_does_with_an_example(project: Project, command: str) -> None:
    result = project.run(command, "--help")
    assert result.returncode == 0
    assert "example:" in result.stdout
    assert f"python -m ouroboros {command}" in result.stdout


def test_resume_is_unpause_under_its_former_name_with_one_warning(project: Project) -> None:
    project.configure(CLOSED)
    result = project.run("resume")
    assert result.returncode == 0, result.stderr
    assert "warning: `resume` is now `unpause`" in one_line(result.stderr.splitlines()[0])
    assert (project.state / UNPAUSE_REQUEST).exists()
    assert not (project.state / FORMER_UNPAUSE_REQUEST).exists()


def test_the_top_help_is_for_users(project: Project) -> None:
    text = project.run("--help").stdout
    assert "examples:" in text
    for command in (
        "run",
        "tell",
        "pause",
        "unpause",
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


def test_a_mistyped_command_says_the_one_meant(project: Project) -> None:
    result = project.run("stauts")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "stauts: unknown command; did you mean status?" in line


@pytest.mark.parametrize("turns", ["many", "-5"])
def test_a_bad_flag_is_one_line_not_the_usage(project: Project, turns: str) -> None:
    project.configure(CLOSED)
    result = project.run("run", "--max-turns", turns)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert f"argument --max-turns: '{turns}' is not a number of calls (0 or more)" in line
    assert "python -m ouroboros run --help" in line
    assert "config.toml" not in line


@pytest.mark.parametrize(
    ("sections", "env", "said"),
    [
        ({}, {"OUROBOROS_TOOL__SANDBOX": "landlock"}, "did you mean OUROBOROS_TOOLS__SANDBOX?"),
        ({"context": {"soft_treshold": 0.6}}, {}, "did you mean soft_threshold?"),
        ({"tools": {"readable": []}}, {}, "tools.readable is empty"),
        ({"tools": {"readable": ["/no/such/place"]}}, {}, "/no/such/place: no such file"),
    ],
)
def test_a_setting_that_is_not_one_is_one_line_before_anything_starts(
    project: Project, sections: dict[str, dict[str, object]], env: dict[str, str], said: str
) -> None:
    project.configure(CLOSED, **sections)
    result = project.run("run", env=env)
    assert result.returncode == 2
    assert said in one_line(result.stderr)
    assert not project.state.exists()


def test_tell_and_pause_reach_a_run_whose_readable_path_is_gone(project: Project) -> None:
    """A path removed since the run started is refused when a run starts, not when a person
    steers one: `tell` and `pause` only leave files in the state folder."""
    gone = project.root / "gone"
    gone.mkdir()
    project.configure(CLOSED, tools={"readable": ["/usr", "/bin", "/lib", str(gone)]})
    gone.rmdir()
    told = project.run("tell", "look at NOTES.md")
    paused = project.run("pause")
    assert told.returncode == paused.returncode == 0, told.stderr + paused.stderr
    started = project.run("run")
    assert started.returncode == 2
    assert f"{gone}: no such file or folder" in one_line(started.stderr)


@pytest.mark.skipif(not sandbox.abi_version(), reason="this kernel has no Landlock")
def test_readable_paths_without_the_programs_are_one_line(project: Project) -> None:
    """Commands may read only an empty folder: the shell is not theirs to run, which the probe
    at start says (it was a traceback)."""
    (project.root / "nothing").mkdir()
    with ScriptedServer([Reply(text="hi")]) as server:
        project.configure(server.url, tools={"readable": ["nothing"]})
        result = project.run("run")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "shell commands cannot run `true`" in line
    assert "tools.readable" in line
