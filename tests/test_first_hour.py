"""A newcomer's first hour at the command line: Ctrl-C while a command starts, setup mistakes a
service manager must not retry, a flag put after the command, help that fits the terminal."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from ouroboros.cli import main
from ouroboros.ground.config import HookEventName
from ouroboros.model.scripted import Reply, ScriptedServer
from tests.conftest import PROJECT_ROOT, Project, only_in_the_slow_tier, wait_for

DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, '-m', 'ouroboros', *sys.argv[1:]])"
)
"""`python -m ouroboros ARGS` as a terminal starts it, Ctrl-C at its default: a shell's background
job (as the test runner may be) passes SIGINT on ignored, and Python then never raises it."""


def open_for_writing(fifo: str) -> int | None:
    """The FIFO's writing end once someone reads it (then its reader's `open` returns and its
    `read` waits for us), else None."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno != errno.ENXIO:  # no reader yet
            raise
        return None


@pytest.mark.slow
def test_ctrl_c_while_a_run_starts_is_one_line(project: Project) -> None:
    """The run is held reading its config (a FIFO no one writes) when Ctrl-C comes: it ends in
    one line and exit code 0, as a Ctrl-C of a running run does."""
    only_in_the_slow_tier()
    config = project.root / "config.toml"
    os.mkfifo(config)
    process = subprocess.Popen(
        [sys.executable, "-c", DEFAULT_SIGINT, "run"],
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writer: list[int] = []

    def reading() -> bool:
        fd = open_for_writing(str(config))
        if fd is not None:
            writer.append(fd)
        return fd is not None

    try:
        wait_for(reading, timeout=60)
        assert writer, "the run never read its config"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
        for fd in writer:
            os.close(fd)
    assert "Traceback" not in err, err
    assert err.splitlines() == ["stopped (Ctrl-C)"], err
    assert out == ""
    assert process.returncode == 0
    assert not project.state.exists()


def unit_setting(name: str) -> str:
    """A setting of the systemd unit docs/many-runs.md gives."""
    text = (PROJECT_ROOT / "docs" / "many-runs.md").read_text()
    unit = text[text.index("[Service]") : text.index("[Install]")]
    return next(line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(name))


@pytest.mark.slow
@pytest.mark.parametrize("instructions", ["missing", "empty"])
def test_a_setup_mistake_is_not_restarted_by_the_documented_unit(
    project: Project, instructions: str
) -> None:
    """No start gets past a missing or empty SYSTEM_PROMPT.md until a person writes it: its exit
    code is one the unit in docs/many-runs.md does not restart on, as a bad config's is."""
    prompt = project.root / "SYSTEM_PROMPT.md"
    if instructions == "missing":
        prompt.unlink()
    else:
        prompt.write_text("\n")
    project.configure("http://127.0.0.1:9/v1")
    result = project.run("run", timeout=60)
    assert unit_setting("Restart") == "on-failure"
    assert str(result.returncode) in unit_setting("RestartPreventExitStatus").split()
    assert result.returncode == project.run("--config", "nowhere.toml", "run").returncode
    assert len(result.stderr.splitlines()) == 1, result.stderr


COMMANDS = [
    [],
    ["run"],
    ["tell"],
    ["task"],
    ["task", "add"],
    ["task", "import"],
    ["pause"],
    ["unpause"],
    ["resume"],
    ["compact"],
    ["rewind"],
    ["tail"],
    ["status"],
    ["report"],
    ["demo"],
]


@pytest.mark.parametrize("columns", [80, 120])
def test_every_help_fits_the_terminal(
    columns: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse takes the width from COLUMNS: the descriptions and examples are fitted to it
    (they were single lines of up to 304 characters)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    for command in COMMANDS:
        with pytest.raises(SystemExit) as ended:
            main([*command, "--help"])
        assert ended.value.code == 0
        text = capsys.readouterr().out
        assert max(len(line) for line in text.splitlines()) <= columns, (command, text)
        # What was said is all there, only laid out anew.
        assert "example:" in text or "examples:" in text or command[:1] in (["resume"], ["task"])


def test_a_long_example_command_is_broken_where_a_shell_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An example command wider than the terminal is still one a person can copy: broken
    between words (a quoted one whole), each line but the last ending with a backslash."""
    monkeypatch.setenv("COLUMNS", "62")
    with pytest.raises(SystemExit):
        main(["task", "--help"])
    lines = capsys.readouterr().out.split("example:\n")[1].splitlines()
    assert len(lines) > 1
    assert all(len(line) <= 62 for line in lines)
    assert all(line.endswith(" \\") for line in lines[:-1])
    command = (
        'python -m ouroboros task add "parse ISO dates" --check "pytest -q tests/test_dates.py"'
    )
    assert " ".join(line.removesuffix(" \\").strip() for line in lines) == command


def test_config_after_the_command_is_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --config X` was refused as an unknown argument: the flag is taken after the
    command as before it."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "elsewhere.toml"
    config.write_text('[paths]\nstate_dir = "runs/a"\n')
    assert main(["status", "--config", str(config)]) == 1
    assert f"no run in {tmp_path / 'runs' / 'a'}" in capsys.readouterr().out
    assert main(["run", "--config", str(tmp_path / "nowhere.toml")]) == 2
    assert "nowhere.toml: config file not found" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 120])
def test_the_template_purpose_warning_fits_the_terminal(project: Project, columns: int) -> None:
    """It named the instructions' path in one line of 134 characters at 120 columns."""
    deep = project.root / "a-project-folder-with-a-name-as-long-as-they-come"
    deep.mkdir()
    (deep / "SYSTEM_PROMPT.md").write_text((PROJECT_ROOT / "SYSTEM_PROMPT.md").read_text())
    with ScriptedServer([Reply(text="hi")]) as server:
        project.configure(
            server.url,
            paths={"system_prompt": str(deep / "SYSTEM_PROMPT.md")},
            supervisor={"max_total_turns": 1},
        )
        result = project.run("run", timeout=60, env={"COLUMNS": str(columns)})
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert "still has the template's empty # Purpose" in said
    assert max(len(line) for line in result.stderr.splitlines()) <= columns, result.stderr


def test_config_toml_and_the_docs_list_every_hook_event() -> None:
    """config.toml's comment listed eight of the ten events a hook may run on."""
    events = list(get_args(HookEventName))
    config = (PROJECT_ROOT / "config.toml").read_text()
    listed = next(line for line in config.splitlines() if line.startswith("# events: "))
    assert listed.removeprefix("# events: ").split(", ") == events
    docs = (PROJECT_ROOT / "docs" / "configuration.md").read_text()
    table = re.findall(r"^\| `(\w+)` \| ", docs.split("on its `events`:")[1], re.M)
    assert table[: len(events)] == events
