"""A newcomer's first hour at the command line: Ctrl-C while a command starts, setup mistakes a
service manager must not retry, a flag put after the command, help that fits the terminal."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys

import pytest

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
