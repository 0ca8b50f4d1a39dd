"""Workspace checkpoints: a copy of the workspace at each session start, committed to a git
repository in the state folder (`checkpoints.git`, the workspace its work tree), and the rewind
that puts one back (`python -m ouroboros rewind --session N`).

A checkpoint holds the workspace's files and links but the harness's outputs (`.outputs/`), what
the workspace's `.gitignore` files ignore, and another repository inside it (a folder with its
own `.git`). A rewind moves the files of the day it replaces or removes to a folder of the state
folder (never deleting one), and writes the checkpoint's: the workspace is then as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from ouroboros.config import Settings
from ouroboros.errors import NEEDED_FREE_BYTES
from ouroboros.run.checkpoint_records import Checkpoint, Rewound
from ouroboros.run.git_store import LEFT_OUT, GitFailed, GitStuck, Repo, commit_header, quoted
from ouroboros.run.journal import Journal
from ouroboros.run.state_folder import CHECKPOINTS, REWOUND
from ouroboros.run.workspace_files import (
    FOLDER,
    clear_way,
    move_aside,
    prune,
    read_entry,
    walk,
    write_entry,
)


@dataclass
class Committed:
    commit: str = ""
    files: int = 0
    size: int = 0
    listed: list[bytes] = field(default_factory=list)
    left_out: list[bytes] = field(default_factory=list)
    """Past the size limit: not in the commit."""
    walked: bool = False
    """Git's listing was stuck: the workspace was walked instead, ignore rules aside."""


def repo_of(settings: Settings) -> Repo:
    return Repo(settings.paths.state_dir / CHECKPOINTS, settings.paths.workspace.resolve())


async def commit_workspace(repo: Repo, ref: str, title: str, max_bytes: int) -> Committed:
    """Commit the workspace as it is to `ref` (its files in path order while `max_bytes` holds
    them, the rest left out and named in the commit's message)."""
    await repo.ready()
    root = os.open(repo.work_tree, FOLDER)
    try:
        try:
            taken = Committed(listed=await repo.listing())
        except GitStuck:
            taken = Committed(listed=walk(root), walked=True)
        out = await repo.fast_import(_stream(root, taken, ref, title, max_bytes))
    finally:
        os.close(root)
    taken.commit = out.decode().split()[-1]
    await repo.run("gc", "--auto", "--quiet")  # packs of fast-import, one per commit, merged
    return taken


async def _stream(
    root: int, taken: Committed, ref: str, title: str, max_bytes: int
) -> AsyncIterator[bytes]:
    yield b"feature done\n"
    kept: list[tuple[bytes, str]] = []
    for path in taken.listed:
        room = max_bytes - taken.size
        found = await anyio.to_thread.run_sync(read_entry, root, path, room)
        if found is None:
            continue  # gone, or no longer a file or a link
        if found.data is None:
            taken.left_out.append(path)
            continue
        taken.size += found.size
        kept.append((path, found.mode))
        yield b"blob\nmark :%d\ndata %d\n%s\n" % (len(kept), found.size, found.data)
    taken.files = len(kept)
    message = title
    if taken.left_out:
        named = [os.fsdecode(p) for p in taken.left_out]
        message += f"\n\n{LEFT_OUT}{json.dumps(named)}"
    yield commit_header(ref, len(kept) + 1, message + "\n")
    for mark, (path, mode) in enumerate(kept, 1):
        yield b"M %s :%d %s\n" % (mode.encode(), mark, quoted(path))
    yield b"\nget-mark :%d\ndone\n" % (len(kept) + 1)


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
    except (GitFailed, OSError) as e:
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


def failure(e: GitFailed | OSError) -> str:
    """What went wrong, in a few words."""
    if isinstance(e, GitFailed):
        return str(e)
    where = f": {os.fsdecode(e.filename)}" if e.filename is not None else ""
    return f"{e.strerror or e}{where}"


@dataclass
class Restored:
    today: str
    moved: list[bytes] = field(default_factory=list)
    written: int = 0


async def restore(repo: Repo, commit: str, aside: Path, max_bytes: int) -> Restored:
    """The workspace as the commit `commit` holds it: the files of the day that differ, or that
    it did not hold, moved beneath `aside`; its own written where they differ. Files it left out
    (past the size limit) stay as they are."""
    target, keep = await repo.tree(commit), await repo.left_out(commit)
    stamp = aside.name
    today = await commit_workspace(repo, f"refs/rewinds/{stamp}", f"before {stamp}", max_bytes)
    now = await repo.tree(today.commit)
    done = Restored(today.commit)
    root, away = os.open(repo.work_tree, FOLDER), os.open(aside, FOLDER)
    try:
        for path in today.listed:
            same = path in now and target.get(path) == now[path]
            if path not in keep and not same and move_aside(root, path, away):
                done.moved.append(path)
        writes = [p for p, e in target.items() if now.get(p) != e]
        blobs = await repo.blobs(sorted({target[p].oid for p in writes}))
        for path in writes:
            done.moved += clear_way(root, path, away)
            write_entry(root, path, target[path].mode, blobs[target[path].oid])
            done.written += 1
        # What the restored `.gitignore` files no longer hide, that the checkpoint did not hold.
        for path in await repo.listing() if not today.walked else []:
            if path not in target and path not in keep and move_aside(root, path, away):
                done.moved.append(path)
        for path in done.moved:
            prune(root, path)
    finally:
        os.close(root)
        os.close(away)
    return done


def aside_folder(state_dir: Path, session: int) -> Path:
    """A new folder for the files a rewind moves aside."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(100):
        name = f"{stamp}-to-session-{session}" + (f"-{n}" if n else "")
        path = state_dir / REWOUND / name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{state_dir / REWOUND}: no free name for {stamp}")


def rewound_record(session: int, commit: str, aside: Path, done: Restored, after: int) -> Rewound:
    return Rewound(
        session=session,
        commit=commit,
        moved_aside=str(aside) if done.moved else "",
        moved=len(done.moved),
        restored=done.written,
        today=done.today,
        after_session=after,
    )
