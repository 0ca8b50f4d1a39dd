"""Workspace checkpoints: a copy of the workspace at each session start, committed to a git
repository in the state folder (`checkpoints.git`, the workspace its work tree), which the rewind
puts back (`checkpoints/rewind.py`, for `python -m ouroboros rewind --session N`).

A checkpoint holds the workspace's files and links, and every `.gitignore` git reads (its rules
are part of what the workspace was), but the harness's outputs (`.outputs/`), what the
workspace's `.gitignore` files ignore, and another repository inside it (a folder with its own
`.git`). A rewind puts the checkpoint's ignore rules back first, and by them, not today's, moves
the files of the day it replaces or removes to a folder of the state folder (never deleting one)
and writes the checkpoint's: the workspace is then as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio

from ouroboros.checkpoints import cache as checkpoint_cache
from ouroboros.checkpoints.cache import Stamp
from ouroboros.checkpoints.git_store import (
    LEFT_OUT,
    RULES_HELD,
    GitFailed,
    Repo,
    Unlisted,
    commit_header,
    quoted,
)
from ouroboros.checkpoints.records import Checkpoint, Checkpoints
from ouroboros.checkpoints.workspace_files import FOLDER, read_entries, walk
from ouroboros.ground.config import Settings
from ouroboros.ground.errors import NEEDED_FREE_BYTES
from ouroboros.ground.state_folder import CHECKPOINTS
from ouroboros.run.session import Feature
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal


@dataclass
class Committed:
    commit: str = ""
    files: int = 0
    size: int = 0
    listed: list[bytes] = field(default_factory=list)
    left_out: list[bytes] = field(default_factory=list)
    """Past the size limit: not in the commit."""
    walked: bool = False
    """Git could not list the workspace: it was walked instead, ignore rules aside."""
    unpacked: str = ""
    """Why git's tidying up after the commit failed ("" where it did not): the commit holds."""


BATCH_FILES, BATCH_BYTES = 1000, 8 << 20
"""Files read in one call of a worker thread: a call for each of 100,000 small files cost more
than reading them, and a batch of large ones is held in memory whole."""
FAILURES = (GitFailed, OSError, ValueError)
"""What the workspace can make a checkpoint or a rewind fail with: git saying no or stuck, a
file or folder that cannot be read or written, git's output not what it should be (a
`ValueError`, such as a commit message's list of left-out files unreadable)."""


def repo_of(settings: Settings) -> Repo:
    return Repo(settings.paths.state_dir / CHECKPOINTS, settings.paths.workspace.resolve())


async def commit_workspace(
    repo: Repo,
    ref: str,
    title: str,
    max_bytes: int,
    walk_if_unlisted: bool = True,
    also: frozenset[bytes] = frozenset(),
) -> Committed:
    """Commit the workspace as it is to `ref` (its files in path order while `max_bytes` holds
    them, the rest left out and named in the commit's message), and those of the paths `also`
    there, ignored or not. Where git cannot list it, it is walked if `walk_if_unlisted`, else
    that failure is raised."""
    await repo.ready()
    known, started_ns = checkpoint_cache.load(repo.git_dir), time.time_ns()
    read: list[tuple[bytes, Stamp, int | str]] = []
    root = os.open(repo.work_tree, FOLDER)
    try:
        try:
            taken = Committed(listed=sorted(also.union(await repo.listing())))
        except Unlisted:
            if not walk_if_unlisted:
                raise
            walked = await anyio.to_thread.run_sync(walk, root)
            taken = Committed(listed=walked, walked=True)
        stream = _stream(root, taken, (ref, title, max_bytes), known, read)
        try:
            out = await repo.fast_import(stream)
        except GitFailed:
            checkpoint_cache.forget(repo.git_dir)
            raise
    finally:
        os.close(root)
    said = out.split()
    if not said or not said[-1].isalnum():
        raise GitFailed(f"git fast-import gave no commit for {ref}")
    taken.commit = said[-1].decode()
    # Without it the next checkpoint reads every file again (or trusts the older one, whose
    # stamps still say which files are unchanged): slower, never wrong.
    with contextlib.suppress(OSError):
        checkpoint_cache.save(repo.git_dir, read, started_ns)
    # A fast-import leaves a pack of its own (or, for a few files, loose objects): never merged,
    # a run of many sessions piles them up and every lookup slows. The commit holds without it.
    try:
        await repo.run("gc", "--auto", "--quiet")
    except GitFailed as e:
        taken.unpacked = str(e)
    return taken


async def _stream(
    root: int,
    taken: Committed,
    commit: tuple[str, str, int],
    known: checkpoint_cache.Known,
    read: list[tuple[bytes, Stamp, int | str]],
) -> AsyncIterator[bytes]:
    """The fast-import stream of `commit` (ref, title, max_bytes): a blob for each file read,
    the id the last checkpoint stored for one `known` unchanged; what was read goes in `read`."""
    ref, title, max_bytes = commit
    yield b"feature done\n"
    kept: list[tuple[bytes, str, bytes]] = []
    at = 0
    while at < len(taken.listed):
        paths = taken.listed[at : at + BATCH_FILES]
        room = max_bytes - taken.size
        batch = (root, paths, room, BATCH_BYTES, known)
        found_all = await anyio.to_thread.run_sync(read_entries, *batch)
        at += len(found_all)
        blobs = []
        for path, found in zip(paths[: len(found_all)], found_all, strict=True):
            if found is None:
                continue  # gone, or no longer a file or a link
            if found.data is None and not found.oid:
                taken.left_out.append(path)
                continue
            taken.size += found.size
            mark = len(kept) + 1
            ref_of: int | str = found.oid or mark
            if found.stamp is not None:
                read.append((path, found.stamp, ref_of))
            if found.data is None:
                kept.append((path, found.mode, found.oid.encode()))
                continue
            kept.append((path, found.mode, b":%d" % mark))
            blobs.append(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, found.size, found.data))
        yield b"".join(blobs)
    taken.files = len(kept)
    message = f"{title}\n\n{RULES_HELD}"
    if taken.left_out:
        named = [os.fsdecode(p) for p in taken.left_out]
        message += f"\n{LEFT_OUT}{json.dumps(named)}"
    yield commit_header(ref, len(kept) + 1, message + "\n")
    for path, mode, data in kept:
        yield b"M %s %s %s\n" % (mode.encode(), data, quoted(path))
    yield b"\nget-mark :%d\ndone\n" % (len(kept) + 1)


class Checkpointing(Feature):
    """The feature's calls from the run: a checkpoint as each session starts, and a note of a
    rewind in the next session's opening."""

    def __init__(self, settings: Settings, journal: Journal):
        self.settings, self.journal = settings, journal

    async def session_starting(self, session: int) -> None:
        await take_checkpoint(self.settings, self.journal, session)

    def opening(self, state: RunState) -> tuple[str, bool]:
        # After a rewind the last step's files are gone: nothing is carried (the note says why).
        checkpoints = state.part(Checkpoints)
        return checkpoints.note(state.session), checkpoints.pending(state.session) is None


async def take_checkpoint(settings: Settings, journal: Journal, session: int) -> None:
    """Commit the workspace as session `session` starts, and journal it; where git fails,
    a warning (once a run) and the run goes on without."""
    if not settings.checkpoints.enabled:
        return
    # A checkpoint never takes the room the journal needs to go on: on a disk that low, none.
    free = shutil.disk_usage(settings.paths.state_dir).free
    if free < NEEDED_FREE_BYTES:
        journal.notify(
            "warning",
            f"no checkpoint of the workspace at session {session} ({free:,} bytes free on the "
            f"state folder's disk, less than the {NEEDED_FREE_BYTES:,} a run keeps for its "
            "journal); the run goes on",
            session=session,
            once="checkpoint_room",
        )
        return
    limit = settings.checkpoints.max_bytes
    try:
        taken = await commit_workspace(
            repo_of(settings), f"refs/checkpoints/session-{session}", f"session {session}", limit
        )
    except FAILURES as e:
        journal.notify(
            "warning",
            f"no checkpoint of the workspace at session {session} ({failure(e)}); the run goes on",
            session=session,
            once="checkpoint_failed",
        )
        return
    if taken.walked:
        journal.notify(
            "warning",
            f"git could not list the workspace at session {session} (stuck on a FIFO where it "
            "reads, such as a .gitignore?): the checkpoint holds every file, ignore rules aside",
            session=session,
            once="checkpoint_walked",
        )
    if taken.unpacked:
        journal.notify(
            "warning",
            f"the checkpoint of session {session} is taken, but git could not merge the "
            f"repository's packs ({taken.unpacked}); it tries again at the next one",
            session=session,
            once="checkpoint_unpacked",
        )
    if taken.left_out:
        journal.notify(
            "warning",
            f"the checkpoint of session {session} left out {len(taken.left_out)} file(s) past "
            f"checkpoints.max_bytes ({limit:,} bytes): raise it, or name them in the "
            "workspace's .gitignore",
            session=session,
            once="checkpoint_size",
        )
    journal.append(
        Checkpoint(
            session=session,
            commit=taken.commit,
            files=taken.files,
            bytes=taken.size,
            left_out=len(taken.left_out),
        )
    )


def failure(e: GitFailed | OSError | ValueError) -> str:
    """What went wrong, in a few words."""
    if not isinstance(e, OSError):
        return " ".join(str(e).split())[:300]
    where = f": {os.fsdecode(e.filename)}" if e.filename is not None else ""
    return f"{e.strerror or e}{where}"
