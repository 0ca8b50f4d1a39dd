"""How many processes and how much memory one command may take (`tools.max_processes`,
`tools.max_memory_mb`), so that a fork bomb or a runaway allocation takes the command down, not
the machine, and the next command still runs.

Memory: `RLIMIT_DATA` of every process (its private writable memory; virtual reservations such as
a JIT's or a Go runtime's do not count). Processes: `RLIMIT_NPROC`, set after the command entered
its user namespace, where the kernel counts only the command's own processes. Root is exempt from
`RLIMIT_NPROC` whatever its capabilities, so root's commands each get a cgroup of their own in
the cgroup v1 `pids` hierarchy instead, where one is mounted (`PidsCgroups`); a user without a
user namespace gets the limit on top of the processes it already runs (the kernel counts them all).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ouroboros.tools.child_exit import MEMORY_LIMIT, PROCESS_LIMIT
from ouroboros.tools.libc import libc

_RLIMIT_DATA, _RLIMIT_NPROC = 2, 6
REMOVE_WAIT_S = 2.0
"""How long the session's end waits for killed processes to leave their pids cgroups."""

_setrlimit = libc.setrlimit


class _Limit(ctypes.Structure):
    _fields_ = (("current", ctypes.c_ulong), ("maximum", ctypes.c_ulong))


def _own_tasks() -> int:
    """Processes and threads the kernel counts against this user's RLIMIT_NPROC now."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += len(os.listdir(f"/proc/{entry.name}/task"))
    return count


@dataclass
class Limits:
    """Built before fork; `apply` runs in the child, after it entered its namespaces."""

    max_processes: int
    """0: no limit."""
    max_memory_mb: int
    """0: no limit."""
    own_namespace: bool
    """The command runs in a user namespace of its own: RLIMIT_NPROC counts only its tasks."""

    def __post_init__(self) -> None:
        processes = self.max_processes
        if processes and not self.own_namespace and os.getuid() != 0:
            processes += _own_tasks()
        self.lowered: list[str] = []
        """Limits set lower than configured: the machine's hard limit is lower, and a command
        without privileges cannot raise it (it would fail to start)."""
        processes = self._within(resource.RLIMIT_NPROC, processes, "tools.max_processes", 1)
        self._processes = _Limit(processes, processes) if processes else None
        data = self._within(
            resource.RLIMIT_DATA, self.max_memory_mb << 20, "tools.max_memory_mb", 1 << 20
        )
        self._memory = _Limit(data, data) if data else None

    def _within(self, kind: int, wanted: int, key: str, unit: int) -> int:
        hard = resource.getrlimit(kind)[1]
        if not wanted or hard == resource.RLIM_INFINITY or wanted <= hard:
            return wanted
        self.lowered.append(f"{key} is lowered to this machine's hard limit, {hard // unit:,}")
        return hard

    def apply(self) -> None:
        processes, memory = self._processes, self._memory
        if processes is not None and _setrlimit(_RLIMIT_NPROC, ctypes.byref(processes)) != 0:
            os._exit(PROCESS_LIMIT)
        if memory is not None and _setrlimit(_RLIMIT_DATA, ctypes.byref(memory)) != 0:
            os._exit(MEMORY_LIMIT)

    def gap(self, pids: bool) -> str | None:
        """What does not hold: the processes of root's commands, without a pids hierarchy."""
        if self.max_processes and not pids and os.getuid() == 0:
            return (
                "tools.max_processes does not hold: root ignores RLIMIT_NPROC, and no cgroup v1 "
                "pids hierarchy is mounted"
            )
        return None

    def summary(self, pids: bool) -> str:
        memory = "memory: no limit"
        if self.max_memory_mb:
            memory = f"memory: {self.max_memory_mb} MB a process (RLIMIT_DATA)"
        if not self.max_processes:
            return f"processes: no limit; {memory}"
        if pids:
            held = "a pids cgroup"
        elif os.getuid() == 0:
            held = "NOT held: root ignores RLIMIT_NPROC and no cgroup v1 pids hierarchy is mounted"
        elif self.own_namespace:
            held = "RLIMIT_NPROC in its user namespace"
        else:
            held = "RLIMIT_NPROC, counted with the user's other processes"
        return f"processes: {self.max_processes} a command ({held}); {memory}"


def mounted(kind: str, option: str = "") -> Path | None:
    """Where a file system of this kind (with this mount option) is mounted, if it is."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) > 3 and fields[2] == kind and (not option or option in fields[3].split(",")):
            return Path(fields[1])
    return None


def remove_pids_cgroup(path: Path) -> bool:
    """Kill what is in a pids cgroup (v1 has no `cgroup.kill`) and its children, then remove
    them; False while some process has not left yet."""
    for child in [p for p in path.iterdir() if p.is_dir()] if path.is_dir() else []:
        remove_pids_cgroup(child)
    with contextlib.suppress(OSError, ValueError):
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


class PidsCgroups:
    """The run's folder in the cgroup v1 pids hierarchy, and a cgroup in it per command."""

    def __init__(self, root: Path, name: str, max_processes: int):
        self.path = root / name
        self.max_processes = max_processes
        self._count = 0

    @classmethod
    def make(cls, name: str, max_processes: int) -> PidsCgroups | None:
        """Where root may make them: a pids hierarchy mounted, writable."""
        root = mounted("cgroup", "pids") if os.geteuid() == 0 and max_processes else None
        if root is None:
            return None
        for stale in root.glob("ouroboros-*"):
            owner = stale.name.split("-")[1]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                remove_pids_cgroup(stale)
        cgroups = cls(root, name, max_processes)
        try:
            cgroups.path.mkdir(exist_ok=True)
        except OSError:
            return None
        return cgroups

    def for_command(self) -> tuple[Path, int]:
        """A new cgroup with the command's limit, and its `cgroup.procs` open for the child."""
        self._count += 1
        path = self.path / str(self._count)
        path.mkdir()
        (path / "pids.max").write_text(str(self.max_processes))
        return path, os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    @staticmethod
    def release(path: Path) -> None:
        """The command ended: its cgroup goes, unless something it started runs on in it (a
        daemon that left its process group), which the session's end kills."""
        with contextlib.suppress(OSError):
            path.rmdir()

    def end_session(self) -> None:
        """Kill what the session's commands left and remove their cgroups, waiting a little
        for the killed to leave them (what is still there then, the watchdog removes)."""
        deadline = time.monotonic() + REMOVE_WAIT_S
        left = [p for p in self.path.iterdir() if p.is_dir()]
        while left and time.monotonic() < deadline:
            left = [child for child in left if not remove_pids_cgroup(child)]
            if left:
                time.sleep(0.01)
