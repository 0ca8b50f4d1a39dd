"""A checkpoint never costs the run its journal: on a disk too low for one, or one that fills
while it is written, there is no checkpoint (a warning) and the run goes on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ouroboros.model.scripted import Reply, ScriptedServer
from tests.conftest import Project, tmpfs_at

pytestmark = pytest.mark.slow  # every test here runs `python -m ouroboros`


@pytest.fixture
def state_on_20_mb(project: Project) -> Iterator[Path]:
    """The state folder on a 20 MB tmpfs: more than the 16 MB a run keeps for its journal."""
    with tmpfs_at(project.state, "20m") as state:
        yield state


def test_a_checkpoint_the_disk_cannot_hold_is_a_warning_and_leaves_nothing(
    project: Project, state_on_20_mb: Path
) -> None:
    # Random bytes do not compress: git's pack of them cannot fit in what the disk has.
    (project.workspace / "data.bin").write_bytes(os.urandom(24 * 1024 * 1024))
    with ScriptedServer(lambda body: Reply(text="working")) as server:
        project.configure(server.url)
        done = project.run("run", "--max-turns", "3")
    assert done.returncode == 0, done.stderr
    warnings = [e["message"] for e in project.events("warning")]
    assert any(w.startswith("no checkpoint of the workspace at session 1") for w in warnings)
    assert not project.events("checkpoint")
    repository = state_on_20_mb / "checkpoints.git"
    assert not [*repository.glob("objects/pack/tmp_*"), *repository.glob("fast_import_crash_*")]
    assert len(project.usage()) == 3
