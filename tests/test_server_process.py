"""The managed model server (`[server] command`), through real processes: the scripted
loopback server started as a command, killed, started again, stopped with the run."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx2
import pytest

from ouroboros.ground.config import ServerSettings
from ouroboros.ground.figures import RunLimits
from ouroboros.ground.state_folder import SERVER_LOG, SERVER_PID
from ouroboros.server.files import CappedLog
from ouroboros.server.process import Exit, ManagedServer, ServerGaveUp
from ouroboros.server.records import ServerPart, ServerStarted
from ouroboros.state.fold import RunState
from ouroboros.state.records import Starting
from tests.conftest import PROJECT_ROOT, Project, free_port, wait_for

COMMAND = [sys.executable, str(PROJECT_ROOT / "tests" / "scripted_command.py")]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone but for its entry: it serves nothing.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


class Watched:
    """A managed server in process, its starts, exits and warnings kept; `command` is given the
    port it is to serve on."""

    def __init__(
        self,
        command: list[str] | Callable[[int], list[str]],
        state_dir: Path,
        use_cgroup: bool = True,
        **settings: float,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.starts: list[int] = []
        self.exits: list[Exit] = []
        self.warnings: list[str] = []
        if command is COMMAND:
            command = [*COMMAND, str(self.port), "5"]
        self.server = ManagedServer(
            ServerSettings(
                command=command(self.port) if callable(command) else command, **settings
            ),
            self.url,
            state_dir,
            self.starts.append,
            self.exits.append,
            self.warnings.append,
            use_cgroup,
        )

    async def serving(self, group: anyio.abc.TaskGroup) -> None:
        """The server started in `group`, once it says it is ready."""
        ready = anyio.Event()
        group.start_soon(self.server.serve, ready)
        with anyio.fail_after(60):  # a bound, not a measure: never reached when it works
            await ready.wait()

    def started_again_after(self, act: Callable[[int], None]) -> None:
        """Serve; once it answers, `act` on the first server (its pid); return once a second
        one answers, stopping it."""

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                ready = anyio.Event()
                tg.start_soon(self.server.serve, ready)
                await ready.wait()
                act(self.starts[0])
                with anyio.fail_after(60):  # a bound, not a measure: never reached when it works
                    while len(self.starts) < 2 or not await self.answers():
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()

        anyio.run(main)

    async def answers(self) -> bool:
        try:
            async with httpx2.AsyncClient() as client:
                return (await client.get(self.url + "/models")).status_code == 200
        except httpx2.HTTPError:
            return False


def test_a_server_killed_with_9_is_started_again_and_stopped_with_the_run(tmp_path: Path) -> None:
    watched = Watched(COMMAND, tmp_path, ready_timeout_s=30)

    def kill(pid: int) -> None:
        assert (tmp_path / SERVER_PID).read_text().split()[0] == str(pid)
        os.kill(pid, signal.SIGKILL)

    watched.started_again_after(kill)
    assert len(watched.starts) == 2
    assert watched.exits[0].signal == "SIGKILL"
    assert all(not alive(pid) for pid in watched.starts), "the run's end left a server running"
    assert not (tmp_path / SERVER_PID).exists()
    assert "serving on" in (tmp_path / "server.log").read_text()


def test_a_server_that_exits_at_once_gives_up_naming_its_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "print('no model file: x.gguf'); raise SystemExit(3)"]
    watched = Watched(command, tmp_path, max_restarts=2)

    async def main() -> None:
        await watched.server.serve(anyio.Event())

    said = r"stopped 3 times in .* it exited before answering 3 times; the last time, exit status 3"
    with pytest.raises(ServerGaveUp, match=said + r".*/server\.log$"):
        anyio.run(main)
    assert [e.code for e in watched.exits] == [3, 3, 3]
    assert "no model file" in watched.exits[-1].tail


def test_a_stalled_server_is_killed_and_started_again(tmp_path: Path) -> None:
    watched = Watched(COMMAND, tmp_path, ready_timeout_s=30)
    watched.started_again_after(lambda pid: watched.server.stood_still())
    assert watched.exits[0].signal == "SIGKILL"


# --- whole runs through the command -------------------------------------------------------------


def managed_project(
    project: Project, turns: int, *mark: str, **sections: dict[str, object]
) -> Project:
    port = free_port()
    project.configure(
        f"http://127.0.0.1:{port}/v1",
        server={"command": [*COMMAND, str(port), str(turns), *mark], "ready_timeout_s": 60},
        **sections,
    )
    return project


def replies(project: Project) -> list[dict[str, object]]:
    return [
        r
        for r in project.records("journal.jsonl")
        if r.get("kind") == "message" and r["message"]["kind"] == "assistant"
    ]


@pytest.mark.slow
def test_a_run_whose_server_is_killed_with_9_finishes_every_turn_once(project: Project) -> None:
    """The server is killed in the middle of a reply; the run starts it again, makes that call
    again and the rest of its turns: no turn lost or made twice (the cut reply journalled
    nowhere), and the run's end leaves no server."""
    turns = 6
    heard, mark = project.root / "hook.json", project.root / "mid-reply"
    write = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text(sys.stdin.read())"
    hook = {"events": ["server_restart"], "command": [sys.executable, "-c", write, str(heard)]}
    managed_project(project, turns, str(mark), hooks={"on": [hook]})
    run = project.start("run")
    wait_for(mark.exists, timeout=120)
    assert mark.exists(), "the second reply never began"
    pid = int((project.state / "server.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    _, errors = run.communicate(timeout=300)
    assert run.returncode == 0, errors
    said = [str(r["message"]) for r in replies(project)]
    assert not any("halfway" in text for text in said), "the cut reply was journalled"
    assert len(said) == turns
    assert len(set(said)) == turns
    journal = project.records("journal.jsonl")
    started = [r for r in journal if r.get("kind") == "server_started"]
    assert [r["restart"] for r in started] == [False, True]
    assert all(not alive(int(r["pid"])) for r in started)
    assert any(r["kind"] == "server_exited" and r["signal"] == "SIGKILL" for r in journal)
    status = project.run("status").stdout
    assert "not running, 1 restart(s)" in status
    wait_for(heard.exists)
    assert '"server_restart"' in heard.read_text(), "the server_restart hook did not run"


@pytest.mark.slow
def test_a_run_whose_server_command_has_a_typo_says_so_and_goes_on_once_it_is_fixed(
    project: Project,
) -> None:
    """The server exits at once (its port mistyped): one line says what happened, naming the
    log. The journal then holds only the harness's own records: the fixed command resumes
    the run, with no `--fresh`."""
    port = free_port()
    typo = [*COMMAND, "80O0", "2"]
    project.configure(f"http://127.0.0.1:{port}/v1", server={"command": typo, "max_restarts": 1})
    result = project.run("run")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "never answered" not in lines[0]
    assert "stopped twice in " in lines[0]
    assert "it exited before answering twice; the last time, exit status 1 after" in lines[0]
    assert lines[0].endswith("server.log")
    project.configure(
        f"http://127.0.0.1:{port}/v1",
        server={"command": [*COMMAND, str(port), "2"], "ready_timeout_s": 60},
    )
    result = project.run("run")
    assert result.returncode == 0, result.stderr
    assert len(replies(project)) == 2


@pytest.mark.slow
def test_a_run_killed_with_9_leaves_no_server(project: Project) -> None:
    managed_project(project, 1000)
    run = project.start("run")
    wait_for(lambda: len(replies(project)) >= 1, timeout=120)
    assert replies(project)
    pid = int((project.state / "server.pid").read_text().split()[0])
    run.kill()
    run.communicate()
    wait_for(lambda: not alive(pid), timeout=60)
    assert not alive(pid), "a run killed with -9 left its server running"


@pytest.mark.slow
def test_a_server_that_stands_still_mid_reply_is_killed_and_the_run_goes_on(
    project: Project,
) -> None:
    """A reply that stands still past `llm.timeout_s`: the retry layer says so, the run kills
    the server's group and starts it again, and the call made again gets its answer."""
    mark = project.root / "mid-reply"
    managed_project(project, 4, str(mark), llm={"timeout_s": 2, "retry_for_s": 60})
    result = project.run("run")
    assert result.returncode == 0, result.stderr
    journal = project.records("journal.jsonl")
    exits = [r for r in journal if r["kind"] == "server_exited"]
    assert exits[0]["signal"] == "SIGKILL", exits
    assert [r["restart"] for r in journal if r["kind"] == "server_started"] == [False, True]
    assert len(replies(project)) == 4


@pytest.mark.slow
def test_a_server_command_that_names_no_program_is_one_line(project: Project) -> None:
    """A setup mistake no start gets past: exit 2, which the documented unit does not restart."""
    project.configure("http://127.0.0.1:9/v1", server={"command": ["llama-servr", "-m", "x"]})
    result = project.run("run")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: server.command: 'llama-servr' is not a program on PATH nor an executable file; "
        "fix [server] command in the config"
    )
    assert not (project.state / "server.log").exists()


PLANTS: dict[str, Callable[[Path], None]] = {
    "link": lambda path: path.symlink_to(path.parent.parent / "outside.txt"),
    "FIFO": lambda path: os.mkfifo(path),
    "folder": lambda path: path.mkdir(),
}


@pytest.mark.slow
@pytest.mark.parametrize("plant", list(PLANTS))
@pytest.mark.parametrize("name", [SERVER_PID, SERVER_LOG])
def test_a_planted_pid_file_or_log_is_neither_followed_nor_waited_on(
    project: Project, name: str, plant: str
) -> None:
    """What stands at server.pid or server.log is set aside: a file a link points to is not
    written, a FIFO not waited on, a folder no traceback."""
    outside = project.state.parent / "outside.txt"
    outside.write_text("keep")
    project.state.mkdir(parents=True, exist_ok=True)
    PLANTS[plant](project.state / name)
    managed_project(project, 1)
    result = project.run("run", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert outside.read_text() == "keep"
    assert os.path.lexists(project.state / f"{name}.rejected")
    assert "serving on" in (project.state / SERVER_LOG).read_text()


def test_a_server_that_never_answers_gives_up_however_slow_each_start_is(tmp_path: Path) -> None:
    """Starts that each wait `ready_timeout_s` in vain are spread wider than the restart window
    (as with the defaults, 300 s each in 600 s): in a row, they give up all the same."""
    command = [sys.executable, "-c", "import time; time.sleep(600)"]
    watched = Watched(command, tmp_path, ready_timeout_s=0.5, restart_window_s=0.2, max_restarts=2)

    async def main() -> None:
        with anyio.fail_after(60):  # a bound, not a measure: without the rule, it never ends
            await watched.server.serve(anyio.Event())

    said = r"never answered: 3 starts in a row; it did not answer within server.ready_timeout_s"
    with pytest.raises(ServerGaveUp, match=said + r" \(0.5 s\) 3 times; the last time, killed by"):
        anyio.run(main)
    assert len(watched.exits) == 3
    assert all(not alive(e.pid) for e in watched.exits)


def test_a_new_start_of_the_run_forgets_the_server_a_killed_run_left() -> None:
    """A run killed with -9 journals no exit of its server: the next start says no pid."""
    state = RunState()
    state.apply(ServerStarted(pid=4321, log="server.log"))
    assert state.part(ServerPart).pid == 4321
    state.apply(Starting(limits=RunLimits(max_total_turns=1, wind_down_turns=1)))
    assert state.part(ServerPart).pid is None


@pytest.mark.parametrize("plant", ["folder", "link"])
def test_the_log_moves_aside_onto_whatever_was_planted_at_its_old_name(
    tmp_path: Path, plant: str
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    before = tmp_path / f"{SERVER_LOG}.1"
    if plant == "folder":
        before.mkdir()
    else:
        before.symlink_to(outside)
    log = CappedLog(tmp_path / SERVER_LOG, max_bytes=64)
    for n in range(4):
        log.write(f"line {n} of the server's output\n".encode())
    log.close()
    assert before.is_file()
    assert not before.is_symlink()
    assert "line" in before.read_text()
    assert outside.read_text() == "keep"
    assert (plant == "folder") == os.path.lexists(tmp_path / f"{SERVER_LOG}.1.rejected")
