"""The run's cgroup v2, made where it can be killed whole, and the watchdog that kills what the
run's commands left and removes its cgroups when the harness dies, however it dies (the pipe
from the harness closes). Cgroups that runs killed before their watchdog started left are swept
when the next run makes its own."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from ouroboros.tools.limits import mounted

WATCHDOG = """
import os, signal, sys, time
cgroup = sys.argv[1]
groups = set()
for line in sys.stdin:
    try:
        if line.startswith("-"):
            groups.discard(int(line[1:]))
        else:
            groups.add(int(line))
    except ValueError:
        pass  # a line cut short by the harness's death
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
def remove_pids(path):
    for entry in os.scandir(path):
        if entry.is_dir():
            remove_pids(entry.path)
    for _ in range(200):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                for pid in f.read().split():
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
if len(sys.argv) > 2 and sys.argv[2]:
    try:
        remove_pids(sys.argv[2])
    except OSError:
        pass
if cgroup:
    for _ in range(600):
        try:
            with open(os.path.join(cgroup, "cgroup.kill"), "w") as f:
                f.write("1")
            os.rmdir(cgroup)
            break
        except OSError:
            time.sleep(0.05)
"""
"""Reads the process groups the harness started (`pid`) or saw end (`-pid`), one a line, until
the pipe closes; then kills those left. A group that ended is forgotten: its number may be
given to another process group later. Then it removes the run's cgroups: the v2 one, whole with
`cgroup.kill`, and the pids one (v1: its processes killed one by one)."""


def _sweep(root: Path) -> None:
    """Remove what runs whose harness and watchdog are both gone left (killed before the
    watchdog started): their processes first, then the cgroup."""
    for path in root.glob("ouroboros-*"):
        owner = path.name.split("-")[1]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            with contextlib.suppress(OSError):
                (path / "cgroup.kill").write_text("1")
                path.rmdir()


def make_cgroup(name: str) -> Path | None:
    """A cgroup v2 for this run, where it may be made and can be killed whole (5.14+)."""
    root = mounted("cgroup2")
    if root is None:
        return None
    _sweep(root)
    path = root / name
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return None
    if not (path / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            path.rmdir()
        return None
    return path


def start_watchdog(cgroup: Path | None, pids: Path | None) -> subprocess.Popen[str]:
    """The watchdog of the run's cgroups (`WATCHDOG`): write it a process group a line."""
    return subprocess.Popen(
        [sys.executable, "-S", "-I", "-c", WATCHDOG, str(cgroup or ""), str(pids or "")],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the harness is not the watchdog's
        text=True,
    )
