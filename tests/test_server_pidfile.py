"""`server.pid` (`ouroboros/server/pidfile.py`): what the next start of a run kills of the
server a killed run left, through real process trees. Only a process carrying that start's id
is signalled; whatever else server.pid says (a pid of 0 or below, one above a C long, a pid
another process took, a group whose leader is gone, a file from before a reboot) signals
nothing, and says so in one line."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from ouroboros.ground.state_folder import SERVER_PID
from ouroboros.server.launch import started_at
from ouroboros.server.pidfile import SERVER_ID, ServerMark, boot_id, kill_orphan, write_mark
from tests.conftest import wait_for
from tests.test_server_process import COMMAND, Watched, alive

KILL_ORPHAN = (
    "import sys, anyio; from pathlib import Path; from ouroboros.server.pidfile import "
    "kill_orphan; print(anyio.run(kill_orphan, Path(sys.argv[1])))"
)


class Spawned:
    """The processes a test starts, all killed once it is done, whatever it left."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []

    def group(self, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
        """A process group of its own: its leader, and a member it started. The leader becomes
        a `sleep` itself rather than wait for the member: a shell waiting would end on its own
        when the member is killed first, and a count of what was killed would race with it."""
        leader = self.start(
            ["sh", "-c", "sleep 600 & echo $!; exec >&-; exec sleep 600"], env, subprocess.PIPE
        )
        assert leader.stdout is not None
        member = int(leader.stdout.readline())
        leader.stdout.close()
        self.pids.append(member)
        return leader, member

    def start(
        self, command: list[str], env: dict[str, str] | None, stdout: int = subprocess.DEVNULL
    ) -> subprocess.Popen[bytes]:
        popen = subprocess.Popen(
            command,
            stdout=stdout,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        self.popens.append(popen)
        return popen

    def end(self) -> None:
        for pid in [p.pid for p in self.popens] + self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for popen in self.popens:
            popen.wait()


@pytest.fixture
def spawned() -> Iterator[Spawned]:
    processes = Spawned()
    yield processes
    processes.end()


def kill_orphan_under_a_shell(state_dir: Path, spawned: Spawned) -> str:
    """`kill_orphan` as a run calls it, under a wrapper shell in a group of their own with a
    witness in it (a `| tee`, a service's shell); what it said. The shell, the witness and the
    harness must all live on."""
    script = (
        f'sleep 600 >/dev/null 2>&1 & echo $!; "{sys.executable}" -c "$0" "$1"; echo shell lived'
    )
    done = subprocess.run(
        ["sh", "-c", script, KILL_ORPHAN, str(state_dir)],
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=60,
    )
    witness, *said = done.stdout.splitlines()
    spawned.pids.append(int(witness))
    assert said[-1:] == ["shell lived"], done
    assert done.stderr == ""
    assert alive(int(witness))
    return "\n".join(said[:-1])


def innocent_cases() -> dict[str, Callable[[int, int, str], str]]:
    """What server.pid may hold that names no process of the run's server, given an innocent
    group's leader, the leader of a group that is gone while a member lives, and a server id
    an innocent process carries."""
    boot = boot_id()
    return {
        "zero": lambda leader, gone, _: f"0 {started_at(leader)}\n",
        "zero with a boot id": lambda leader, gone, _: f"0 {boot} {secrets.token_hex(16)}\n",
        "minus one": lambda leader, gone, _: "-1 0\n",
        "above a C long": lambda leader, gone, _: f"{2**64} {started_at(leader)}\n",
        "a leader's pid and start time": lambda leader, gone, _: f"{leader} {started_at(leader)}\n",
        "a pid another process took": lambda leader, gone, _: (
            f"{leader} {boot} {secrets.token_hex(16)}\n"
        ),
        "a group whose leader is gone": lambda leader, gone, _: (
            f"{gone} {boot} {secrets.token_hex(16)}\n"
        ),
        "a group whose leader is gone, its start time": lambda leader, gone, _: f"{gone} 1\n",
        "before a reboot": lambda leader, gone, marked: (
            f"{leader} {'0' * 8}-0000-0000-0000-{'0' * 12} {marked}\n"
        ),
    }


@pytest.mark.parametrize("case", list(innocent_cases()))
def test_what_names_no_process_of_the_server_signals_nothing(
    tmp_path: Path, case: str, spawned: Spawned
) -> None:
    leader, member = spawned.group()
    gone, orphan = spawned.group()
    marked_id = secrets.token_hex(16)
    marked, marked_member = spawned.group({SERVER_ID: marked_id})
    gone.kill()
    gone.wait()
    (tmp_path / SERVER_PID).write_text(innocent_cases()[case](leader.pid, gone.pid, marked_id))
    said = kill_orphan_under_a_shell(tmp_path, spawned)
    assert all(alive(pid) for pid in (leader.pid, member, orphan, marked.pid, marked_member))
    assert "\n" not in said
    assert not (tmp_path / SERVER_PID).exists()
    if case != "before a reboot":  # a file from before a reboot is said nothing of
        assert "nothing was signalled" in said or said == "None"


def test_a_line_not_in_this_version_s_form_is_said_in_one_line(tmp_path: Path) -> None:
    (tmp_path / SERVER_PID).write_text("0 1\n")
    said = anyio.run(kill_orphan, tmp_path)
    assert said is not None
    assert "held '0 1', which names no server this harness started" in said
    assert "nothing was signalled" in said


def test_every_process_of_the_server_a_killed_run_left_is_killed(
    tmp_path: Path, spawned: Spawned
) -> None:
    """Its launcher and what it started in its group, and one that left the group (`setsid`):
    each carries the start's id."""
    server_id = secrets.token_hex(16)
    leader, member = spawned.group({SERVER_ID: server_id})
    daemon = spawned.start(["sleep", "600"], {SERVER_ID: server_id})
    bystander, bystander_member = spawned.group()
    write_mark(tmp_path, ServerMark(leader.pid, boot_id(), server_id))
    said = anyio.run(kill_orphan, tmp_path)
    assert said == (f"killed the model server a killed run left (pid {leader.pid}; 3 process(es))")
    assert leader.wait(timeout=60) == -signal.SIGKILL
    assert daemon.wait(timeout=60) == -signal.SIGKILL
    wait_for(lambda: not alive(member), timeout=60)
    assert not alive(member)
    assert alive(bystander.pid)
    assert alive(bystander_member)


def test_what_the_server_started_is_killed_once_its_leader_is_gone(
    tmp_path: Path, spawned: Spawned
) -> None:
    """What a run killed with -9 may leave: the launcher gone, a process of the server left
    in its group."""
    server_id = secrets.token_hex(16)
    leader, member = spawned.group({SERVER_ID: server_id})
    write_mark(tmp_path, ServerMark(leader.pid, boot_id(), server_id))
    leader.kill()
    leader.wait()
    assert alive(member)
    assert anyio.run(kill_orphan, tmp_path) is not None
    wait_for(lambda: not alive(member), timeout=60)
    assert not alive(member), "the server the command started was left running"


def test_a_start_says_in_one_warning_what_server_pid_held_that_names_no_server(
    tmp_path: Path,
) -> None:
    """The run journals it (`on_warning`): `0 …` signalled the harness's own group before,
    and nothing said so."""
    (tmp_path / SERVER_PID).write_text("0 1\n")
    watched = Watched(COMMAND, tmp_path, ready_timeout_s=60)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await watched.serving(tg)
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert len(watched.warnings) == 1
    assert "held '0 1', which names no server" in watched.warnings[0]
    assert "nothing was signalled" in watched.warnings[0]


@pytest.mark.parametrize(
    ("plant", "said"),
    [
        (lambda path: path.mkdir(), "a folder"),
        (lambda path: os.mkfifo(path), "a FIFO"),
        (lambda path: path.symlink_to(path.with_name("elsewhere")), "a link"),
        (lambda path: path.write_text(f"{os.getpid()} {'9' * 200}\n"), "over 128 bytes"),
    ],
    ids=["folder", "FIFO", "link", "oversized"],
)
def test_what_is_no_file_this_harness_wrote_is_set_aside_and_said(
    tmp_path: Path, plant: Callable[[Path], object], said: str
) -> None:
    plant(tmp_path / SERVER_PID)
    assert anyio.run(kill_orphan, tmp_path) == (
        f"{tmp_path / SERVER_PID} was {said} (set aside as {SERVER_PID}.rejected): nothing was "
        "signalled"
    )
    assert os.path.lexists(tmp_path / f"{SERVER_PID}.rejected")
    assert not os.path.lexists(tmp_path / SERVER_PID)
