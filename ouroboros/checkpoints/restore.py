"""What a rewind does to the workspace (`python -m ouroboros rewind --session N`, `rewind.py`):
today's workspace committed before anything changes, then the checkpoint's `.gitignore` files
put back first, so that its ignore rules, never today's, decide what is moved aside and what is
left as it is; then the checkpoint's files written where today's differ."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ouroboros.checkpoints.commit import Committed, commit_workspace
from ouroboros.checkpoints.git_store import Repo, Tree, is_rules
from ouroboros.checkpoints.workspace_files import FOLDER, clear_way, move_aside, prune, write_entry


@dataclass
class Rewind:
    """What a rewind is to do, worked out before it changes anything."""

    target: Tree
    keep: set[bytes]
    """Files the checkpoint left out (past the size limit), and today's `.gitignore` files
    that ignore themselves where it is one of an earlier harness (it did not hold them): they
    stay as they are."""
    today: Committed
    now: Tree
    """Today's workspace: its files listed, and those of the checkpoint's paths that today's
    ignore rules hide."""


async def prepare(repo: Repo, commit: str, stamp: str, max_bytes: int) -> Rewind:
    """The checkpoint `commit` read, and today's workspace committed (`refs/rewinds/<stamp>`):
    GitFailed where git cannot list the workspace, as then what its ignore rules leave alone
    is not known."""
    target, keep = await repo.tree(commit), await repo.left_out(commit)
    if not await repo.holds_rules(commit):  # taken by a harness before `RULES_HELD`
        keep |= set(await repo.ignored_rules())
    ref, title = f"refs/rewinds/{stamp}", f"before {stamp}"
    also = frozenset(target)
    today = await commit_workspace(repo, ref, title, max_bytes, walk_if_unlisted=False, also=also)
    return Rewind(target, keep, today, await repo.tree(today.commit))


@dataclass
class Restored:
    today: str
    moved: list[bytes] = field(default_factory=list)
    written: int = 0


async def put_back(repo: Repo, rewind: Rewind, aside: Path, done: Restored) -> None:
    """The workspace as the checkpoint holds it, whatever today's `.gitignore` files say: the
    checkpoint's `.gitignore` files first, and only theirs kept, so that its ignore rules decide
    what else goes; then the files they do not ignore that differ from the checkpoint's, or that
    it did not hold, moved beneath `aside`, and its own written where they differ (a file the
    rules ignore is left as it is). `done` says what was done so far, should it stop part way."""
    target, keep, now = rewind.target, rewind.keep, rewind.now
    root, away = os.open(repo.work_tree, FOLDER), os.open(aside, FOLDER)
    try:
        rules = {p: e for p, e in target.items() if is_rules(p)}
        await _write(repo, root, away, rules, now, done)
        now = {**now, **rules}
        held = set(target) | keep
        listed = await repo.listing()
        while extra := _outermost([p for p in listed if is_rules(p) and p not in held]):
            # Today's own rules: gone, what they hid is listed. A deeper one waits, as the rules
            # above it may hide its folder once today's are gone (it is then left alone).
            moved = [path for path in extra if move_aside(root, path, away)]
            if not moved:  # none could go: listing again would find the same for ever
                break
            done.moved.extend(moved)
            listed = await repo.listing()
        for path in listed:
            same = path in now and target.get(path) == now[path]
            if path not in keep and not same and move_aside(root, path, away):
                done.moved.append(path)
        files = {p: e for p, e in target.items() if p not in rules}
        await _write(repo, root, away, files, now, done)
        for path in done.moved:
            prune(root, path)
    finally:
        os.close(root)
        os.close(away)


def _outermost(paths: list[bytes]) -> list[bytes]:
    """The `.gitignore` files of `paths` beneath no folder of another: a deeper one is read
    only where the rules above it leave its folder listed."""
    folders = {p.rpartition(b"/")[0] for p in paths}
    return [p for p in paths if not any(_beneath(p, f) for f in folders)]


def _beneath(path: bytes, folder: bytes) -> bool:
    """Whether `path` lies in a subfolder of `folder` ("" the top)."""
    parent = path.rpartition(b"/")[0]
    return parent != folder and (not folder or parent.startswith(folder + b"/"))


async def _write(
    repo: Repo, root: int, away: int, entries: Tree, now: Tree, done: Restored
) -> None:
    """The checkpoint's `entries` written where today's differ, what stands there moved aside."""
    writes = [p for p, e in entries.items() if now.get(p) != e]
    blobs = await repo.blobs(sorted({entries[p].oid for p in writes}))
    for path in writes:
        done.moved += clear_way(root, path, away)
        write_entry(root, path, entries[path].mode, blobs[entries[path].oid])
        done.written += 1
