"""The launcher: the process the run starts for its model server, which holds the server and
everything it starts until the last of them ends.

    python -I -S launch.py RUN_PID GRACE_S CGROUP COMMAND...

It joins the cgroup `CGROUP` if one is named (before it starts anything, so that everything
the server starts is in it), becomes a subreaper (`PR_SET_CHILD_SUBREAPER`: a process the
server started and left, by a double fork or under `setsid`, is handed to the launcher when its
parent ends, never to init), and starts `COMMAND`, which the kernel kills if the launcher dies.
It ends once nothing it started runs, as the last of them ended: a command that forks a daemon
and exits 0 has not stopped its server while the daemon runs.

Signals it takes: SIGTERM stops the server (SIGTERM to everything it started, SIGKILL to what
is left `GRACE_S` later); `KILL_NOW` (SIGUSR1) kills everything at once; the kernel sends it
`KILL_NOW` when the run dies, however it dies (`PR_SET_PDEATHSIG`).

Only the standard library, no `site`: the harness imports the /proc helpers from here too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
from collections.abc import Callable
from types import FrameType

KILL_NOW = signal.SIGUSR1
"""Kill the server and all it started now (the run died, or the server stood still)."""
TAKEN = (signal.SIGTERM, KILL_NOW, signal.SIGALRM)
"""The signals the launcher acts on, held back until the command is started: one that comes
before is acted on once there is a command to act on."""
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
CANNOT_RUN = 127
"""The exit status when the command could not be run (its reason is in the server's log)."""


def stat_of(pid: int) -> list[str] | None:
    """The fields of `/proc/<pid>/stat` after the process's name (state first, then the parent,
    the group...); None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def started_at(pid: int) -> str | None:
    """The process's start in clock ticks since boot: with the pid, it names one process."""
    fields = stat_of(pid)
    return fields[19] if fields else None


def ended(pid: int, started: str | None) -> bool:
    """Whether the process that started at `started` is gone (or dead but not yet reaped)."""
    fields = stat_of(pid)
    return fields is None or fields[19] != started or fields[0] in ("Z", "X")


def pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def signal_if(pid: int, signum: int, still: Callable[[int], bool]) -> bool:
    """`signum` to `pid` if `still(pid)` holds once the process is pinned (a pidfd: one that
    took the pid after the check is never signalled); whether it was sent."""
    try:
        handle: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfd (Linux before 5.3): the pid, checked an instant before
        handle = None
    try:
        if not still(pid):
            return False
        if handle is None:
            os.kill(pid, signum)
        else:
            signal.pidfd_send_signal(handle, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        if handle is not None:
            os.close(handle)


def descendants(root: int) -> dict[int, str]:
    """The processes `root` started and those they started, still there: their start times, by
    pid."""
    children: dict[int, list[tuple[int, str]]] = {}
    for pid in pids():
        fields = stat_of(pid)
        if fields is not None:
            children.setdefault(int(fields[1]), []).append((pid, fields[19]))
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for pid, started in children.get(todo.pop(), []):
            found[pid] = started
            todo.append(pid)
    return found


def same(started: str) -> Callable[[int], bool]:
    """Whether a pid still names the process that started at `started`."""
    return lambda pid: started_at(pid) == started


def signal_all(signum: int) -> None:
    """`signum` to everything the launcher started, each as it was found."""
    for pid, started in descendants(os.getpid()).items():
        signal_if(pid, signum, same(started))


class Launcher:
    """What the launcher does when told to stop or kill, and how it waits for the end."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.killing = False

    def stop(self, signum: int, frame: FrameType | None) -> None:
        signal_all(signal.SIGTERM)
        signal.setitimer(signal.ITIMER_REAL, self.grace_s)

    def kill(self, signum: int, frame: FrameType | None) -> None:
        self.killing = True
        signal_all(signal.SIGKILL)

    def wait(self) -> int:
        """Reap until nothing the launcher started is left; the wait status of the last."""
        last = 0
        while True:
            try:
                _, last = os.waitpid(-1, 0)
            except ChildProcessError:
                return last
            if self.killing:  # what a dying process forked meanwhile was handed to us
                signal_all(signal.SIGKILL)


def end_as(status: int) -> None:
    """Exit as the process whose wait status is `status` did: the run reads how the server
    ended from the launcher's."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the server's crash, not a core of ours
        with contextlib.suppress(OSError):  # SIGKILL has no handler to reset
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        sys.exit(128 + signum)  # a signal that does not end a process by default
    sys.exit(os.waitstatus_to_exitcode(status))


def run_command(command: list[str], launcher: int) -> None:
    """In the child: become the command, killed by the kernel if the launcher dies."""
    for signum in TAKEN:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, TAKEN)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != launcher:
        os._exit(CANNOT_RUN)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        os.write(2, f"cannot run {command[0]}: {e.strerror or e}\n".encode())
    os._exit(CANNOT_RUN)


def main(argv: list[str]) -> None:
    run, grace_s, cgroup, command = int(argv[1]), float(argv[2]), argv[3], argv[4:]
    signal.pthread_sigmask(signal.SIG_BLOCK, TAKEN)
    if cgroup:
        try:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write("0")
        except OSError as e:  # the subreaper still holds what the server starts
            os.write(2, f"the server is in no cgroup of the run: {e.strerror or e}\n".encode())
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    launcher = Launcher(grace_s)
    signal.signal(signal.SIGTERM, launcher.stop)
    signal.signal(signal.SIGALRM, launcher.kill)
    signal.signal(KILL_NOW, launcher.kill)
    libc.prctl(_PR_SET_PDEATHSIG, KILL_NOW, 0, 0, 0)
    if os.getppid() != run:  # the run died before it could be told
        sys.exit(CANNOT_RUN)
    me = os.getpid()
    if os.fork() == 0:
        run_command(command, me)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, TAKEN)
    end_as(launcher.wait())


if __name__ == "__main__":
    main(sys.argv)
