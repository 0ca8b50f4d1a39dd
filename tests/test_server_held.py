"""A server that leaves the process the run started (a double fork, a `setsid` child) is still
the run's: its launcher's exit 0 is no exit while what it started serves, and stopping the run,
or killing the launcher, ends all of it. In the run's cgroup and, where none can be made,
held by the launcher alone (a subreaper)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from ouroboros.server.launch import stat_of
from ouroboros.server.process import LAUNCHER
from tests.conftest import PROJECT_ROOT, Project, free_port, wait_for
from tests.test_server_process import Watched, alive, replies

DAEMON = str(PROJECT_ROOT / "tests" / "daemon_command.py")
WAYS = ["double-fork", "setsid"]


def daemon_command(how: str, pidfile: Path) -> list[str]:
    return [sys.executable, DAEMON, how, str(pidfile)]


@pytest.mark.parametrize("use_cgroup", [True, False], ids=["cgroup", "subreaper"])
@pytest.mark.parametrize("how", WAYS)
def test_a_server_that_leaves_its_process_is_served_and_stopped_whole(
    tmp_path: Path, how: str, use_cgroup: bool
) -> None:
    pidfile = tmp_path / "daemon.pid"
    watched = Watched(
        lambda port: [*daemon_command(how, pidfile), str(port), "5"],
        tmp_path,
        use_cgroup=use_cgroup,
        ready_timeout_s=60,
    )
    held: list[tuple[int, int]] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await watched.serving(tg)
            daemon = int(pidfile.read_text())
            fields = stat_of(daemon)
            assert fields is not None
            held.append((daemon, int(fields[1])))
            assert await watched.answers()
            tg.cancel_scope.cancel()

    anyio.run(main)
    daemon, parent = held[0]
    if how == "double-fork":  # handed to the launcher when its parent ended, never to init
        assert parent == watched.starts[0]
    assert len(watched.starts) == 1
    assert len(watched.exits) == 1, "the command's exit 0 counted as the server's"
    assert not alive(daemon), "stopping the run left the server running"
    assert not alive(watched.starts[0])
    assert watched.warnings == []


@pytest.mark.parametrize("use_cgroup", [True, False], ids=["cgroup", "subreaper"])
def test_a_launcher_killed_with_9_takes_what_left_its_process_with_it(
    tmp_path: Path, use_cgroup: bool
) -> None:
    """Anyone's `kill -9` of the pid `status` shows: the daemon the command left (handed to
    init by then) is killed too, and the server started again answers on its port."""
    pidfile = tmp_path / "daemon.pid"
    watched = Watched(
        lambda port: [*daemon_command("double-fork", pidfile), str(port), "5"],
        tmp_path,
        use_cgroup=use_cgroup,
        ready_timeout_s=60,
    )
    first: list[int] = []
    left_running: list[bool] = []

    def kill(launcher: int) -> None:
        first.append(int(pidfile.read_text()))
        os.kill(launcher, signal.SIGKILL)

    def started(pid: int) -> None:
        if first:  # the start after the kill: what the first left is gone by then
            left_running.append(alive(first[0]))
        watched.starts.append(pid)

    watched.server.on_start = started
    watched.started_again_after(kill)
    assert watched.exits[0].signal == "SIGKILL"
    assert left_running == [False], "the first server's daemon outlived its launcher"
    assert not alive(int(pidfile.read_text()))


def test_the_launcher_stops_all_the_server_started_when_its_run_dies(tmp_path: Path) -> None:
    """No cgroup, nothing but the launcher: the process that started it is killed with -9 and
    the daemon the command left (handed to the launcher) is killed with it."""
    pidfile, port = tmp_path / "daemon.pid", free_port()
    command = daemon_command("double-fork", pidfile)
    run = subprocess.Popen(
        [sys.executable, "-c", STARTS_A_LAUNCHER, LAUNCHER, *command, str(port), "5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None
    launcher = int(run.stdout.readline())
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=60)
    daemon = int(pidfile.read_text())
    assert alive(daemon)
    run.kill()
    run.wait()
    run.stdout.close()
    wait_for(lambda: not alive(daemon) and not alive(launcher), timeout=60)
    assert not alive(daemon), "the daemon outlived the run"
    assert not alive(launcher)


STARTS_A_LAUNCHER = """
import os, subprocess, sys, time
launcher = subprocess.Popen(
    [sys.executable, "-I", "-S", sys.argv[1], str(os.getpid()), "10", "", *sys.argv[2:]],
    start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
print(launcher.pid, flush=True)
time.sleep(600)
"""


# --- whole runs through the command -------------------------------------------------------------


def daemon_project(project: Project, how: str, turns: int) -> Path:
    """A project whose server command leaves its process `how`; where the server's pid goes."""
    port, pidfile = free_port(), project.root / "daemon.pid"
    command = [*daemon_command(how, pidfile), str(port), str(turns)]
    project.configure(
        f"http://127.0.0.1:{port}/v1", server={"command": command, "ready_timeout_s": 60}
    )
    return pidfile


@pytest.mark.slow
@pytest.mark.parametrize("how", WAYS)
def test_a_run_whose_server_leaves_its_process_ends_with_all_of_it(
    project: Project, how: str
) -> None:
    pidfile = daemon_project(project, how, 3)
    result = project.run("run")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not alive(int(pidfile.read_text())), "the run's end left its server running"
    journal = project.records("journal.jsonl")
    assert [r["restart"] for r in journal if r["kind"] == "server_started"] == [False]
    assert len([r for r in journal if r["kind"] == "server_exited"]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("how", WAYS)
def test_a_run_killed_with_9_takes_a_server_that_left_its_process_with_it(
    project: Project, how: str
) -> None:
    pidfile = daemon_project(project, how, 1000)
    run = project.start("run")
    wait_for(lambda: len(replies(project)) >= 1, timeout=120)
    daemon = int(pidfile.read_text())
    assert alive(daemon)
    run.kill()
    run.communicate()
    wait_for(lambda: not alive(daemon), timeout=60)
    assert not alive(daemon), "a run killed with -9 left its server running"
