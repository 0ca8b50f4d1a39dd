"""Checkpoints and rewinds over what the file system does: a move aside to another file system
(copied, then only what was copied removed), and a file unchanged since the last checkpoint not
read again (while one edited, its modification time put back, is)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ouroboros.checkpoints import cache as checkpoint_cache
from ouroboros.checkpoints.workspace_files import FOLDER, move_aside, read_entries
from tests.conftest import tmpfs_at
from tests.test_checkpoints_hostile import Places, places, repo_of, take

__all__ = ["places"]


@pytest.fixture
def other_file_system(tmp_path: Path) -> Iterator[Path]:
    """A folder on a tmpfs of its own: a rename from there to `tmp_path` crosses devices."""
    with tmpfs_at(tmp_path / "mnt", "64m") as mount:
        yield mount


def test_a_move_to_another_file_system_copies_then_removes(
    other_file_system: Path, tmp_path: Path
) -> None:
    ws, aside = other_file_system, tmp_path / "aside"
    (ws / "d" / "e").mkdir(parents=True)
    (ws / "d" / "e" / "a.txt").write_text("A")
    (ws / "d" / "l").symlink_to("/etc/passwd")
    os.mkfifo(ws / "d" / "p")
    (ws / "s").mkdir()
    (ws / "s" / "kept.txt").write_text("kept")
    os.mknod(ws / "s" / "dev", 0o600 | 0o020000, os.makedev(1, 3))  # a device: cannot be copied
    aside.mkdir()
    root, away = os.open(ws, FOLDER), os.open(aside, FOLDER)
    try:
        assert move_aside(root, b"d", away)
        with pytest.raises(OSError, match="cannot move to another file system"):
            move_aside(root, b"s", away)
    finally:
        os.close(root)
        os.close(away)
    assert not (ws / "d").exists()
    assert (aside / "d" / "e" / "a.txt").read_text() == "A"
    assert os.readlink(aside / "d" / "l") == "/etc/passwd"
    assert (aside / "d" / "p").is_fifo()
    # Nothing it could not copy is removed.
    assert (ws / "s" / "kept.txt").read_text() == "kept"
    assert (ws / "s" / "dev").exists()


@pytest.mark.slow
def test_a_file_unchanged_since_the_last_checkpoint_is_not_read_again(places: Places) -> None:
    ws, _, _ = places
    (ws / "same.txt").write_text("same")
    (ws / "edited.txt").write_text("old!")
    time.sleep(checkpoint_cache.RACY_NS / 1e9 + 0.1)  # older than a tick of the clock
    repo = repo_of(places)
    first = take(repo)
    # Edited in place, its size and modification time put back as they were: its change time,
    # which no one but the kernel sets, still says it changed.
    before = (ws / "edited.txt").stat()
    (ws / "edited.txt").write_text("new!")
    os.utime(ws / "edited.txt", ns=(before.st_atime_ns, before.st_mtime_ns))
    known = checkpoint_cache.load(repo.git_dir)
    root = os.open(ws, FOLDER)
    try:
        same, edited = read_entries(root, [b"edited.txt", b"same.txt"], 10**8, 10**8, known)[::-1]
    finally:
        os.close(root)
    assert same is not None
    assert edited is not None
    assert (same.data, edited.data) == (None, b"new!")
    then = subprocess.run(
        ["git", "rev-parse", f"{first.commit}:same.txt"], env=repo.env(), capture_output=True
    )
    assert same.oid == then.stdout.decode().strip()
    second = take(repo)
    shown = subprocess.run(
        ["git", "show", f"{second.commit}:edited.txt", f"{second.commit}:same.txt"],
        env=repo.env(),
        capture_output=True,
    )
    assert shown.stdout == b"new!same"
