"""The agent's tools against an adversary: escapes, breakage and leftovers, run against the real
tools in a real workspace, with the kernel's confinement (Landlock) and without it.

Every case must end with: no escape (the files outside the workspace and the state folder as
they were), no crash (a result comes back), a one-line error the model can act on where it is
refused, nothing left behind (no temporary file, no process). Without Landlock, the cases that
only the kernel stops are listed, and checked to be exactly those.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from ouroboros.ground.messages import ToolCall
from ouroboros.tools import ToolCaps, ToolOutcome, ToolRunner, sandbox
from ouroboros.tools.blocklist import Blocklist
from ouroboros.tools.processes import Processes
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in
from tests.conftest import wait_for

LANDLOCK = sandbox.abi_version()


@dataclass
class Place:
    root: Path
    runner: ToolRunner
    port: int
    processes: Processes

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def state(self) -> Path:
        return self.root / ".ouroboros"

    @property
    def outside(self) -> Path:
        return self.root / "outside"


def listener() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)

    def accept() -> None:
        while True:
            try:
                connection, _ = server.accept()
                connection.close()
            except TimeoutError:
                continue
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


@pytest.fixture(params=["landlock", "off"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    if request.param == "landlock" and not LANDLOCK:
        pytest.skip("this kernel has no Landlock (Linux 5.13+ with landlock in lsm=)")
    root = tmp_path / "project"
    for folder in ("workspace", ".ouroboros", "outside", "tmp"):
        (root / folder).mkdir(parents=True)
    (root / ".ouroboros" / "journal.jsonl").write_text('{"kind": "run_start"}\n')
    (root / "outside" / "sentinel").write_text("untouched\n")
    (root / "SYSTEM_PROMPT.md").write_text("# Purpose\n")
    workspace = Workspace(root / "workspace", root / "SYSTEM_PROMPT.md")
    confinement = (
        sandbox.build([workspace.root, root / "tmp"], [Path("/")], root / ".ouroboros", False)
        if request.param == "landlock"
        else None
    )
    server, port = listener()
    processes = Processes(confinement)
    shell = ShellExec(
        3.0,
        processes,
        {**os.environ, "TMPDIR": str(root / "tmp")},
        Blocklist(workspace=str(workspace.root), protected=[str(root / ".ouroboros")]),
    )
    runner = ToolRunner(workspace, built_in(shell, root / ".ouroboros", True), ToolCaps(4000))
    yield Place(root, runner, port, processes)
    runner.close()
    server.close()


def call(place: Place, name: str, **arguments: object) -> ToolOutcome:
    tool_call = ToolCall(id="c1", name=name, arguments=json.dumps(arguments))
    return anyio.run(place.runner.run, tool_call)


def shell(place: Place, command: str, timeout_s: float = 0) -> ToolOutcome:
    return call(place, "shell_exec", command=command, timeout_s=timeout_s)


def untouched(place: Place) -> bool:
    try:
        journal = (place.state / "journal.jsonl").read_text()
        sentinel = (place.outside / "sentinel").read_text()
    except FileNotFoundError:
        return False
    kept = journal == '{"kind": "run_start"}\n' and sentinel == "untouched\n"
    return kept and not (place.outside / "new").exists()


def refused_in_one_line(outcome: ToolOutcome) -> bool:
    text = outcome.message.content
    return text.startswith("error: ") and "\n" not in text.strip()


Check = Callable[[Place], bool]


def escape(command: str) -> Check:
    """A shell command that tries to change or read what it must not: refused or failing."""

    def check(place: Place) -> bool:
        filled = command.replace("{root}", str(place.root)).replace("{port}", str(place.port))
        outcome = shell(place, filled)
        # Refused, or it ran and read or changed nothing (perl ignores a failed open).
        return "run_start" not in outcome.message.content and untouched(place)

    return check


def tool_refused(name: str, **arguments: object) -> Check:
    def check(place: Place) -> bool:
        filled = {k: str(v).format(root=place.root) for k, v in arguments.items()}
        return refused_in_one_line(call(place, name, **filled)) and untouched(place)

    return check


def planted(setup: str, says: str, name: str, **arguments: object) -> Check:
    """The shell plants something (a link, a FIFO), then a file tool is pointed at it: refused
    for what it is (`says`), at once, not after waiting on it."""

    def check(place: Place) -> bool:
        shell(place, setup.format(root=place.root))
        outcome = call(place, name, **arguments)
        said = says in outcome.message.content
        return refused_in_one_line(outcome) and said and untouched(place)

    return check


def survives(command: str, timeout_s: float, *expected: str) -> Check:
    """A command that floods, hangs or misbehaves: a result comes back, saying what happened."""

    def check(place: Place) -> bool:
        outcome = shell(place, command, timeout_s)
        text = outcome.message.content
        return all(e in text for e in expected) and len(text.encode()) <= 4000

    return check


def nothing_outlives(command: str) -> Check:
    """The command returns at once (its job is not waited for, so no timeout), and what it
    leaves running is gone once the session ends."""

    def check(place: Place) -> bool:
        pids = place.workspace / "pids"
        outcome = shell(place, command.format(pids=pids))
        returned = outcome.message.exit_code == 0 and "timed out" not in outcome.message.content
        left = [int(p) for p in pids.read_text().split()] if pids.exists() else []
        alive_before = any(map(alive, left))
        place.runner.end_session()
        wait_for(lambda: not any(map(alive, left)), timeout=5)
        return returned and alive_before and not any(map(alive, left))

    return check


def alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" not in status.read_text()
    except OSError:
        return False


CASES: dict[str, Check] = {
    "file_read ..": tool_refused("file_read", path="../.ouroboros/journal.jsonl"),
    "file_read absolute": tool_refused("file_read", path="/etc/passwd"),
    "file_read /proc/self/root": tool_refused(
        "file_read", path="/proc/self/root{root}/.ouroboros/journal.jsonl"
    ),
    "file_write ..": tool_refused("file_write", path="../outside/new", content="x"),
    "file_write absolute": tool_refused("file_write", path="{root}/outside/new", content="x"),
    "file_read NUL": tool_refused("file_read", path="a\x00b"),
    "list_dir ..": tool_refused("list_dir", path=".."),
    "link to the state": planted(
        "ln -s {root}/.ouroboros/journal.jsonl link", "link", "file_read", path="link"
    ),
    "link to a folder outside": planted(
        "ln -s {root}/outside out", "a symbolic link", "file_write", path="out/new", content="x"
    ),
    "symlink loop": planted("ln -s a b; ln -s b a", "a symbolic link", "file_read", path="a"),
    "FIFO": planted("mkfifo pipe", "(a FIFO)", "file_read", path="pipe"),
    "device": planted("true", "outside the workspace", "file_read", path="/dev/zero"),
    "malformed JSON": lambda p: refused_in_one_line(
        anyio.run(p.runner.run, ToolCall(id="c", name="file_read", arguments='{"path": '))
    ),
    "unknown tool": lambda p: refused_in_one_line(
        anyio.run(p.runner.run, ToolCall(id="c", name="rm_everything", arguments="{}"))
    ),
    "10 MB argument": lambda p: refused_in_one_line(shell(p, "echo " + "x" * 10_000_000)),
    "shell redirect out": escape("echo x > {root}/outside/sentinel"),
    "shell redirect .. out": escape("echo x > ../outside/new"),
    "python write out": escape("python3 -c \"open('{root}/outside/sentinel', 'w').write('x')\""),
    "perl write out": escape("perl -e 'open(F, \">{root}/outside/new\"); print F 1'"),
    "python rmtree the state": escape(
        "python3 -c \"import shutil; shutil.rmtree('{root}/.ouroboros')\""
    ),
    "read the state": escape("cat ../.ouroboros/journal.jsonl"),
    "read the state through /proc": escape("cat /proc/self/root{root}/.ouroboros/journal.jsonl"),
    "python reads the state": escape(
        "python3 -c \"print(open('{root}/.ouroboros/journal.jsonl').read())\""
    ),
    "append to the journal": escape("echo x >> ../.ouroboros/journal.jsonl"),
    "delete the state": escape("rm -rf ../.ouroboros"),
    "sudo by path": escape("/usr/bin/sudo true"),
    "chmod -R /": escape("chmod -R 777 /"),
    "named fork bomb": escape("bomb(){ bomb|bomb& };bomb"),
    "network": lambda p: (
        shell(
            p, f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {p.port}), 2)\""
        ).message.exit_code
        != 0
    ),
    # The limit is far above the time the command needs on an idle machine: what is tested is
    # the cap on what comes back, not the clock (20 s timed out on a busy 2-core machine).
    "50 MB of output": survives(
        "head -c 50000000 /dev/zero | tr '\\0' a", 600, "bytes) cut", "exit code 0"
    ),
    "binary output": survives("head -c 200000 /dev/urandom", 10, "bytes) cut"),
    "never exits": survives("sleep 1000", 1, "timed out after 1 s"),
    "background job": nothing_outlives("sleep 300 & echo $! > {pids}"),
    "setsid job": nothing_outlives("setsid sleep 300 > /dev/null 2>&1 & echo $! > {pids}"),
    "nohup job": nothing_outlives("nohup sleep 300 > /dev/null 2>&1 & echo $! > {pids}"),
}
KERNEL_ONLY = {
    "shell redirect out",
    "shell redirect .. out",
    "python write out",
    "perl write out",
    "python rmtree the state",
    "read the state through /proc",
    "python reads the state",
    "network",
}
"""What only Landlock stops: without it these escape (the block list sees no danger)."""


@pytest.mark.parametrize("case", list(CASES))
def test_hostile(place: Place, case: str, request: pytest.FixtureRequest) -> None:
    confined = place.processes.confinement is not None
    if case == "setsid job" and not place.processes.mechanism.endswith("(a cgroup)"):
        pytest.skip("no cgroup v2 here: a command that calls setsid escapes process groups")
    held = CASES[case](place)
    if confined or case not in KERNEL_ONLY:
        assert held, f"{case}: not held"
    else:
        assert not held, f"{case}: held without the kernel; it is not kernel-only"
    assert not list(place.root.rglob("*.ouroboros-tmp")), "a temporary file was left behind"
