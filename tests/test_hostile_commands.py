"""Commands run with no privileges, whoever runs the harness: what a command tries with root's
powers, on the metadata outside the workspace, on the network with `tools.network = false`, and
with a fork bomb, against the real `ToolRunner`, confined and with `tools.sandbox = "off"`.

Confined, every case holds. Unconfined, a case escapes where the test says it does (some only
when the tests run as root): those show the confinement, not something else, is what holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import tempfile
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

ROOT = os.geteuid() == 0
LEGACY_TIOCSTI = not Path("/proc/sys/dev/tty/legacy_tiocsti").exists() or (
    Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() == "1"
)
"""Whether a process may type into its own controlling terminal without CAP_SYS_ADMIN."""
MAX_PROCESSES = 50
MAX_MEMORY_MB = 512


@dataclass
class Box:
    root: Path
    runner: ToolRunner
    confined: bool
    processes: Processes

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def sentinel(self) -> Path:
        return self.root / "outside" / "sentinel"

    @property
    def state(self) -> Path:
        return self.root / ".ouroboros"


@pytest.fixture(params=["confined", "off"])
def box(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Box]:
    confined = request.param == "confined"
    if confined and not sandbox.abi_version():
        pytest.skip("this kernel has no Landlock (Linux 5.13+ with landlock in lsm=)")
    root = tmp_path / "project"
    for folder in ("workspace", ".ouroboros", "outside", "tmp"):
        (root / folder).mkdir(parents=True)
    (root / ".ouroboros" / "journal.jsonl").write_text('{"kind": "run_start"}\n')
    (root / "outside" / "sentinel").write_text("untouched\n")
    workspace = Workspace(root / "workspace", root / "SYSTEM_PROMPT.md")
    confinement = (
        sandbox.build([workspace.root, root / "tmp"], [Path("/")], root / ".ouroboros", False)
        if confined
        else None
    )
    processes = Processes(confinement, max_processes=MAX_PROCESSES, max_memory_mb=MAX_MEMORY_MB)
    shell = ShellExec(
        5.0,
        processes,
        {**os.environ, "TMPDIR": str(root / "tmp")},
        Blocklist(enabled=False),  # the kernel's answer is under test, not the first answer
    )
    runner = ToolRunner(workspace, built_in(shell, root / ".ouroboros", True), ToolCaps(4000))
    yield Box(root, runner, confined, processes)
    runner.close()
    for path in (root / "outside" / "sentinel", root / ".ouroboros"):
        # Undo what escaped, so that the folder can be removed.
        subprocess.run(["chattr", "-i", path], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            path.chmod(0o755)


def shell(box: Box, command: str) -> ToolOutcome:
    call = ToolCall(id="c1", name="shell_exec", arguments=json.dumps({"command": command}))
    return anyio.run(box.runner.run, call)


def python(code: str) -> str:
    return f"python3 -c {json.dumps(code)}"


Check = Callable[[Box], bool]
"""True: the command was refused what it tried."""


def unchanged(command: str, *paths: str) -> Check:
    """The command tries to change the metadata (mode, owner, times, flags, xattrs) of files
    outside the workspace: `{sentinel}`, `{state}`."""

    def check(box: Box) -> bool:
        targets = {"sentinel": box.sentinel, "state": box.state}
        before = {name: _metadata(targets[name]) for name in paths}
        shell(box, command.format(sentinel=box.sentinel, state=box.state))
        return all(_metadata(targets[name]) == before[name] for name in paths)

    return check


def _metadata(path: Path) -> tuple[object, ...]:
    status = path.stat()
    lsattr = subprocess.run(["lsattr", "-d", path], capture_output=True, text=True, check=False)
    attributes = lsattr.stdout.split(" ")[0]
    try:
        xattrs = sorted(os.listxattr(path))
    except OSError:
        xattrs = []
    return status.st_mode, status.st_uid, status.st_gid, status.st_mtime_ns, attributes, xattrs


def made_nothing(command: str, name: str) -> Check:
    """The command tries to make `name` in the workspace (a device node)."""

    def check(box: Box) -> bool:
        shell(box, command)
        return not os.path.lexists(box.workspace / name)

    return check


def fails(command: str) -> Check:
    def check(box: Box) -> bool:
        return shell(box, command).message.exit_code != 0

    return check


def tiocsti(no_controlling_tty: bool) -> Check:
    """The command types `id` into a terminal (a pty the test holds): nothing arrives."""

    def check(box: Box) -> bool:
        master, terminal = os.openpty()
        try:
            flags = "os.O_RDONLY | os.O_NOCTTY" if no_controlling_tty else "os.O_RDONLY"
            code = (
                f"import fcntl, os, termios; fd = os.open({os.ttyname(terminal)!r}, {flags}); "
                "[fcntl.ioctl(fd, termios.TIOCSTI, bytes([b])) for b in b'id\\n']"
            )
            shell(box, python(code))
            os.set_blocking(terminal, False)
            try:
                typed = os.read(terminal, 100)
            except BlockingIOError:
                typed = b""
            return typed == b""
        finally:
            os.close(master)
            os.close(terminal)

    return check


def file_capability(box: Box) -> bool:
    """The command gives a program of its own a file capability (what `setcap` does)."""
    capability = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)  # cap_net_raw+ep
    code = f"import os; os.setxattr('t', 'security.capability', {capability!r})"
    shell(box, f"cp /bin/true t && {python(code)}")
    try:
        os.getxattr(box.workspace / "t", "security.capability")
    except OSError:
        return True
    return False


def own_chown(box: Box) -> bool:
    shell(box, "touch x && " + python("import os; os.chown('x', 1, 1)"))
    return (box.workspace / "x").stat().st_uid != 1


def received_udp(box: Box) -> bool:
    """A datagram to a port the test listens on, outside the command's network: not received."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.settimeout(1)
        port = server.getsockname()[1]
        code = f"import socket; socket.socket(2, 2).sendto(b'x', ('127.0.0.1', {port}))"
        shell(box, python(code))
        try:
            server.recv(10)
        except TimeoutError:
            return True
        return False


def unix_socket(box: Box) -> bool:
    """A Unix socket listening outside the workspace (an SSH agent, a docker socket): the
    command cannot reach it."""
    folder = Path(tempfile.mkdtemp())
    path = folder / "agent.sock"
    reached = threading.Event()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()
        server.settimeout(5)

        def accept() -> None:
            with contextlib.suppress(OSError):
                connection, _ = server.accept()
                connection.close()
                reached.set()

        waiter = threading.Thread(target=accept)
        waiter.start()
        code = f"import socket; socket.socket(socket.AF_UNIX).connect({str(path)!r})"
        shell(box, python(code))
        server.shutdown(socket.SHUT_RDWR)
        waiter.join()
    path.unlink()
    folder.rmdir()
    return not reached.is_set()


CHOWN_OUT = python("import os; os.chown('{sentinel}', 1, 1)")
XATTR_OUT = python("import os; os.setxattr('{sentinel}', 'user.x', b'1')")
TOUCH_OUT = "touch -d 2000-01-01 {sentinel} {state}"
RAW = python("import socket; socket.socket(2, socket.SOCK_RAW, 1)")
PACKET = python("import socket; socket.socket(17, socket.SOCK_RAW)")
ALLOCATE = python(f"bytearray({MAX_MEMORY_MB + 100} << 20)")
LOOPBACK = python(
    "import socket; s = socket.create_server(('127.0.0.1', 0)); "
    "socket.create_connection(s.getsockname(), 2)"
)

CASES: dict[str, tuple[Check, bool]] = {
    # what the command tries: (check, whether it succeeds unconfined)
    "TIOCSTI into a terminal": (tiocsti(False), LEGACY_TIOCSTI or ROOT),
    "TIOCSTI into a terminal not its own": (tiocsti(True), ROOT),
    "mknod a character device": (made_nothing("mknod c1 c 1 11", "c1"), ROOT),
    "mknod a block device": (made_nothing("mknod b1 b 7 0", "b1"), ROOT),
    "chown its own file": (own_chown, ROOT),
    "set a file capability": (file_capability, ROOT),
    "chmod outside": (unchanged("chmod 000 {sentinel}", "sentinel"), True),
    "chmod the state folder": (unchanged("chmod 000 {state}", "state"), True),
    "chown outside": (unchanged(CHOWN_OUT, "sentinel"), ROOT),
    "touch -d outside": (unchanged(TOUCH_OUT, "sentinel", "state"), True),
    "xattr outside": (unchanged(XATTR_OUT, "sentinel"), True),
    "chattr +i outside": (unchanged("chattr +i {sentinel}", "sentinel"), ROOT),
    "UDP out": (received_udp, True),
    "Unix socket outside": (unix_socket, True),
    "raw ICMP socket": (fails(RAW), ROOT),
    "packet socket": (fails(PACKET), ROOT),
    "more memory than max_memory_mb": (fails(ALLOCATE), False),
}  # fmt: skip
NAMESPACES_ONLY = {
    "chmod outside", "chmod the state folder", "touch -d outside", "xattr outside", "UDP out"
}  # fmt: skip
"""What only the command's own namespaces stop (capabilities and Landlock do not)."""


SLOW = {"Unix socket outside"}  # the server waits out its five-second timeout


def isolated(box: Box) -> bool:
    confinement = box.processes.confinement
    return confinement is not None and confinement.isolation is not None


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in CASES]
)
def test_refused(box: Box, case: str) -> None:
    check, escapes_unconfined = CASES[case]
    if box.confined and case in NAMESPACES_ONLY and not isolated(box):
        pytest.skip("no namespaces here (the tools event says why): this one is not stopped")
    held = check(box)
    if box.confined or not escapes_unconfined:
        assert held, f"{case}: not refused"
    else:
        assert not held, f"{case}: refused without confinement; the test shows nothing"
    assert box.sentinel.read_text() == "untouched\n"


def test_loopback_still_works(box: Box) -> None:
    """No network is not no localhost: a server the command starts is reachable from it."""
    if box.confined and not isolated(box):
        pytest.skip("no network namespace here: Landlock refuses every TCP connection")
    assert shell(box, LOOPBACK).message.exit_code == 0


def test_loopback_server_outlives_its_command(box: Box) -> None:
    """A server one command leaves running on localhost is there for the next: the commands of
    a run share their network namespace."""
    if box.confined and not isolated(box):
        pytest.skip("no network namespace here: Landlock refuses every TCP connection")
    shell(box, "python3 -u -m http.server 0 > server.log 2>&1 &")
    log = box.workspace / "server.log"
    wait_for(lambda: log.exists() and "port " in log.read_text())
    port = log.read_text().split("port ")[1].split(" ")[0]
    fetch = python(f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/')")
    assert shell(box, fetch).message.exit_code == 0


@pytest.mark.slow
def test_fork_bomb_is_bounded(box: Box) -> None:
    """A fork bomb without a pipe holds at most `max_processes` until the session ends; the next
    command still runs, and the session's end leaves nothing."""
    if "NOT held" in box.processes.limited:
        pytest.skip("root without a cgroup v1 pids hierarchy: nothing limits its processes")
    shell(box, "(f() { f & f; }; f) >/dev/null 2>&1 &")
    group = box.processes.started[0].pid
    counts: list[int] = []

    def watched_two_seconds() -> bool:
        counts.append(len(_in_group(group)))
        return len(counts) >= 20

    wait_for(watched_two_seconds, step=0.1)
    assert 0 < max(counts) <= MAX_PROCESSES, counts
    assert "still here" in shell(box, "echo still here | cat").message.content
    box.runner.end_session()
    wait_for(lambda: not _in_group(group) and not _command_cgroups(), timeout=10)
    assert not _in_group(group)
    assert not _command_cgroups(), "a command's pids cgroup was left behind"


def _command_cgroups() -> list[Path]:
    """The pids cgroups this process (the harness) made for its commands, still there."""
    return list(Path("/sys/fs/cgroup/pids").glob(f"ouroboros-{os.getpid()}-*/*/"))


def _in_group(group: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if entry.name.isdigit() and int(fields[2]) == group and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def test_no_pids_cgroup_left_when_no_command_ran() -> None:
    """The run's pids folder is made at start: a run that ran no command removes it too."""
    ours = Path("/sys/fs/cgroup/pids").glob
    before = set(ours(f"ouroboros-{os.getpid()}-*"))
    processes = Processes(None, max_processes=MAX_PROCESSES)
    if set(ours(f"ouroboros-{os.getpid()}-*")) == before:
        pytest.skip("no cgroup v1 pids hierarchy here, or not root")
    processes.close()
    assert set(ours(f"ouroboros-{os.getpid()}-*")) == before
