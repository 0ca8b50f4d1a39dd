"""Every process a tool starts, and how none outlives its session or the harness.

Each command runs in a process group of its own, dies with the harness (a parent-death signal),
and, where the harness may make a cgroup (cgroup v2 with `cgroup.kill`), in the run's cgroup, so
that a command that left its group (`setsid`, a daemon) is caught too. A background job outlives
its command, not its session: `end_session` kills what is left. A small watchdog process holds a
pipe from the harness: when the harness dies, however it dies, the pipe closes and the watchdog
kills what is left, then removes the cgroup.

Each command also gets the run's limits (`limits.py`): processes and memory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from ouroboros.ground.config import Settings
from ouroboros.ground.errors import SetupError
from ouroboros.state.journal import Journal
from ouroboros.tools import sandbox
from ouroboros.tools.child_exit import failed_step
from ouroboros.tools.libc import prctl as _prctl
from ouroboros.tools.limits import Limits, PidsCgroups, remove_pids_cgroup
from ouroboros.tools.run_cgroup import make_cgroup, start_watchdog
from ouroboros.tools.sandbox import Confinement

_PR_SET_PDEATHSIG = 1


class Processes:
    """Starts the tools' processes and makes sure they end."""

    def __init__(
        self,
        confinement: Confinement | None,
        use_cgroup: bool = True,
        max_processes: int = 0,
        max_memory_mb: int = 0,
    ):
        self.confinement = confinement
        isolation = confinement.isolation if confinement else None
        own_namespace = isolation is not None and isolation.as_user
        self.limits = Limits(max_processes, max_memory_mb, own_namespace)
        self.cgroup: Path | None = None
        """The run's cgroup, made with the first command, with the watchdog that removes it."""
        self._name = f"ouroboros-{os.getpid()}-{secrets.token_hex(4)}"
        probe = make_cgroup(self._name) if use_cgroup else None
        self._cgroups = probe is not None
        if probe is not None:
            probe.rmdir()
        self._pids = PidsCgroups.make(self._name, max_processes) if use_cgroup else None
        self._pids_cgroups: dict[int, Path] = {}
        """The pids cgroup of each command still running, by its process group."""
        self._procs_fd: int | None = None
        self.started: list[subprocess.Popen[bytes]] = []
        """This session's commands; each leads a process group of its own."""
        self._watchdog: subprocess.Popen[str] | None = None

    @property
    def mechanism(self) -> str:
        if self._cgroups:
            return "tool processes end with their session and with the harness (a cgroup)"
        return (
            "tool processes end with their session and with the harness (process groups: no "
            "cgroup v2 could be made, so a command that calls setsid can outlive them)"
        )

    @property
    def limited(self) -> str:
        """What limits a command's processes and memory, and by what."""
        return self.limits.summary(pids=self._pids is not None)

    @property
    def gaps(self) -> list[str]:
        """What does not hold on this machine, of the confinement and the limits."""
        gaps = list(self.confinement.gaps) if self.confinement else []
        unlimited = self.limits.gap(pids=self._pids is not None)
        return gaps + ([unlimited] if unlimited else []) + self.limits.lowered

    def start(
        self, command: list[str], cwd: Path, env: Mapping[str, str], talks: bool = False
    ) -> subprocess.Popen[bytes]:
        """Start a command confined, in its own session and process group, output piped;
        `talks`: its input and its errors piped apart too (an MCP server's)."""
        if self._watchdog is None:
            self._watchdog = self._start_watchdog()
        cgroup, pids = self._pids.for_command() if self._pids is not None else (None, None)
        try:
            process = self._popen(command, cwd, env, pids, talks)
        finally:
            if pids is not None:
                os.close(pids)
        if cgroup is not None:
            self._pids_cgroups[process.pid] = cgroup
        self.started.append(process)
        self._tell(f"{process.pid}")
        return process

    def _popen(
        self, command: list[str], cwd: Path, env: Mapping[str, str], pids: int | None, talks: bool
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE if talks else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if talks else subprocess.STDOUT,
            start_new_session=True,
            # Run between fork and exec: only pre-bound calls, no imports (threads exist).
            preexec_fn=self._child_setup(os.fsencode(os.path.abspath(cwd)), pids),
        )

    def probe(self, cwd: Path, env: Mapping[str, str]) -> str | None:
        """Start `true` as every command starts: the set-up step that fails, if one does."""
        process = self.start(["true"], cwd, env)
        output, _ = process.communicate()
        self.finished(process)
        return failed_step(process.returncode, output)

    def finished(self, process: subprocess.Popen[bytes]) -> None:
        """The command ended: if nothing is left in its group, the group's number is no longer
        ours to kill (another group may get it later); a job that let go of the output but
        runs on (`nohup job > log &`) is still killed with the session."""
        try:
            os.killpg(process.pid, 0)
        except OSError:
            self.started.remove(process)
            self._tell(f"-{process.pid}")
            if cgroup := self._pids_cgroups.pop(process.pid, None):
                PidsCgroups.release(cgroup)

    def _tell(self, line: str) -> None:
        if self._watchdog is not None and self._watchdog.stdin is not None:
            with contextlib.suppress(OSError):
                self._watchdog.stdin.write(f"{line}\n")
                self._watchdog.stdin.flush()

    def _start_watchdog(self) -> subprocess.Popen[str]:
        if self._cgroups:
            self.cgroup = make_cgroup(self._name)
        if self.cgroup is not None:
            self._procs_fd = os.open(self.cgroup / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        return start_watchdog(self.cgroup, self._pids.path if self._pids is not None else None)

    def _child_setup(self, cwd: bytes, pids: int | None) -> Callable[[], None]:
        procs, confinement, limits = self._procs_fd, self.confinement, self.limits

        def setup() -> None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if procs is not None:
                os.write(procs, b"0")  # this process into the run's cgroup
            if pids is not None:
                os.write(pids, b"0")  # and into its own pids cgroup
            if confinement is not None:
                confinement.confine(cwd)
            limits.apply()  # in the user namespace: RLIMIT_NPROC counts the command's tasks

        return setup

    def kill(self, group: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)

    def end_session(self) -> None:
        """Whatever the session's commands left running (background jobs) is killed, and the
        commands reaped (a zombie would keep the cgroup from being removed)."""
        for process in self.started:
            self.kill(process.pid)
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                (self.cgroup / "cgroup.kill").write_text("1")
        for process in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
        self.started.clear()
        self._pids_cgroups.clear()
        if self._pids is not None:
            self._pids.end_session()

    def close(self) -> None:
        """Kill what is left; the watchdog, told the harness is done, removes the cgroup."""
        self.end_session()
        if self._procs_fd is not None:
            os.close(self._procs_fd)
            self._procs_fd = None
        if self._watchdog is not None:
            if self._watchdog.stdin is not None:
                with contextlib.suppress(OSError):
                    self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(10)
        elif self._pids is not None:  # no command ran: no watchdog to remove it
            remove_pids_cgroup(self._pids.path)
        if self.confinement is not None:
            self.confinement.close()


def confined_processes(
    settings: Settings, tmp: Path, network: bool, journal: Journal, who: str
) -> tuple[Processes, str]:
    """Processes confined as `tools.sandbox` asks (writes only to the workspace and `tmp`), and
    what the confinement is; what is not confined or limited is a warning naming `who`."""
    t = settings.tools
    confinement, summary = _confinement(settings, tmp, network)
    if confinement is None and t.sandbox == "auto":
        journal.notify("warning", f"{who} run unconfined: {summary}")
    processes = Processes(confinement, max_processes=t.max_processes, max_memory_mb=t.max_memory_mb)
    for gap in processes.gaps:
        journal.notify("warning", f"{who}: {gap}")
    return processes, summary


def _confinement(settings: Settings, tmp: Path, network: bool) -> tuple[Confinement | None, str]:
    t, paths = settings.tools, settings.paths
    if t.sandbox == "off":
        return None, "off (tools.sandbox)"
    try:
        confinement = sandbox.build(
            [paths.workspace, tmp],
            t.readable,
            paths.state_dir,
            network,
            landlock_required=t.sandbox == "landlock",
        )
    except sandbox.SandboxError as e:
        if t.sandbox == "landlock":
            raise SetupError(f'tools.sandbox is "landlock" but {e}') from None
        return None, str(e)
    return confinement, confinement.summary
