"""A check (`ouroboros/progress/`) can do nothing `shell_exec` cannot: the hostile commands of
tests/test_hostile.py run as a plan item's check, through the same tool, with Landlock and
without it. Confined, each is held; unconfined, exactly the kernel-only ones escape, as they do
from `shell_exec`: the confinement, not something else, holds them."""

from __future__ import annotations

import anyio
import pytest

from ouroboros.ground.config import ProgressSettings, Settings
from ouroboros.progress.checks import Checking
from ouroboros.progress.records import CheckRun
from ouroboros.state.journal import Journal
from ouroboros.tools.shell import ShellExec
from tests.conftest import wait_for
from tests.test_hostile import KERNEL_ONLY, Place, alive, place, untouched

__all__ = ["place"]  # the fixture, from the shell's own hostile suite

ESCAPES = {
    "shell redirect out": "echo x > {root}/outside/sentinel",
    "shell redirect .. out": "echo x > ../outside/new",
    "python write out": "python3 -c \"open('{root}/outside/sentinel', 'w').write('x')\"",
    "python rmtree the state": "python3 -c \"import shutil; shutil.rmtree('{root}/.ouroboros')\"",
    "read the state": "cat ../.ouroboros/journal.jsonl",
    "read the state through /proc": "cat /proc/self/root{root}/.ouroboros/journal.jsonl",
    "python reads the state": (
        "python3 -c \"print(open('{root}/.ouroboros/journal.jsonl').read())\""
    ),
    "append to the journal": "echo x >> ../.ouroboros/journal.jsonl",
    "delete the state": "rm -rf ../.ouroboros",
    "sudo by path": "/usr/bin/sudo true",
}
"""What a check tries: as `escape` cases in tests/test_hostile.py."""


def checked(place: Place, command: str, timeout_s: float = 3.0) -> CheckRun:
    """`command` run as a step's check is, by the feature the run wires."""
    shell = place.runner.tools["shell_exec"]
    assert isinstance(shell, ShellExec)
    settings = Settings(progress=ProgressSettings(check_timeout_s=timeout_s))
    feature = Checking(settings, Journal(None), shell, place.runner.workspace, 1000, len)
    return anyio.run(feature.run_check, "hostile", command, "done")


@pytest.mark.parametrize("case", list(ESCAPES))
def test_a_check_escapes_no_more_than_shell_exec(place: Place, case: str) -> None:
    command = ESCAPES[case].replace("{root}", str(place.root))
    ran = checked(place, command)
    held = "run_start" not in ran.tail and untouched(place)
    if place.processes.confinement is not None or case not in KERNEL_ONLY:
        assert held, f"{case}: not held ({ran.tail})"
    else:
        assert not held, f"{case}: held without the kernel; it is not kernel-only"


def test_a_check_that_never_exits_fails_at_its_timeout(place: Place) -> None:
    ran = checked(place, "sleep 1000", timeout_s=1)
    assert ran.exit_code == -9
    assert not ran.passed
    assert "timed out after 1 s" in ran.tail


def test_what_a_check_leaves_running_ends_with_the_session(place: Place) -> None:
    pids = place.workspace / "pids"
    ran = checked(place, f"sleep 300 & echo $! > {pids}")
    assert ran.passed
    left = [int(p) for p in pids.read_text().split()]
    assert any(map(alive, left))
    place.runner.end_session()
    wait_for(lambda: not any(map(alive, left)), timeout=5)
    assert not any(map(alive, left))


def test_a_blocked_command_never_runs_as_a_check(place: Place) -> None:
    ran = checked(place, "rm -rf ../.ouroboros")
    assert ran.exit_code is None
    assert "blocked" in ran.tail
    assert untouched(place)
