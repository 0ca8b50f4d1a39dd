"""The workspace's files as a checkpoint reads them and a rewind moves and writes them: every
path walked one name at a time beneath the workspace's folder, never through a symbolic link
(the agent's commands could have planted one anywhere), and nothing but regular files and links
read (a FIFO or device is never opened for reading)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from ouroboros.checkpoints.cache import Known, Stamp, stamp_of

REGULAR, EXECUTABLE, LINK = "100644", "100755", "120000"
"""The modes git stores a file, an executable file and a symbolic link with."""
FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def folder(root: int, names: list[bytes], create: bool = False) -> Iterator[int]:
    """The folder `names` beneath `root`, each a real folder (made where missing if `create`);
    OSError for a link or a file on the way (ELOOP, ENOTDIR)."""
    fd = os.dup(root)
    try:
        for name in names:
            try:
                step = os.open(name, FOLDER, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, 0o777, dir_fd=fd)
                step = os.open(name, FOLDER, dir_fd=fd)
            os.close(fd)
            fd = step
        yield fd
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Found:
    mode: str
    size: int
    data: bytes | None
    """None: larger than the room it was given, so not read; or unchanged (`oid`)."""
    stamp: Stamp | None = None
    """A regular file's, as it was read."""
    oid: str = ""
    """Unchanged since the last checkpoint read it: its blob there, the file not read again."""


def read_entries(
    root: int, paths: list[bytes], room: int, budget: int, known: Known
) -> list[Found | None]:
    """The files and links at `paths`, in order, in one call (a thread's worth of work): each
    given the room the ones before it left, until `budget` bytes are read; a file `known` as it
    is now not read. A path's folder is opened once for the run of paths beneath it (listings
    come in path order)."""
    found: list[Found | None] = []
    names: list[bytes] | None = None
    parent, read = -1, 0
    try:
        for path in paths:
            *parents, name = path.split(b"/")
            if parents != names:
                if parent >= 0:
                    os.close(parent)
                names, parent = parents, _open(root, parents)
            one = _read(parent, name, room, known.get(path)) if parent >= 0 else None
            found.append(one)
            if one is not None and (one.data is not None or one.oid):
                room = room - one.size
            if one is not None and one.data is not None:
                read += one.size
            if read >= budget:
                break
    finally:
        if parent >= 0:
            os.close(parent)
    return found


def _open(root: int, names: list[bytes]) -> int:
    """The folder `names` beneath `root` (a duplicate descriptor), or -1 where a link, a file
    or nothing stands on the way to it."""
    try:
        with folder(root, names) as fd:
            return os.dup(fd)
    except OSError:
        return -1


def _read(parent: int, name: bytes, room: int, was: tuple[Stamp, str] | None) -> Found | None:
    """The file or link `name` in the folder `parent` (a link's target, never what it points
    to); None for anything else, or where it is gone."""
    try:
        now = os.stat(name, dir_fd=parent, follow_symlinks=False)
        kind = now.st_mode
        unchanged = was is not None and was[0] == stamp_of(now)
        if stat.S_ISREG(kind) and was is not None and unchanged and now.st_size <= room:
            mode = EXECUTABLE if kind & stat.S_IXUSR else REGULAR
            return Found(mode, now.st_size, None, was[0], was[1])
        if stat.S_ISLNK(kind):
            target = os.readlink(name, dir_fd=parent)
            return Found(LINK, len(target), target if len(target) <= room else None)
        if not stat.S_ISREG(kind):
            return None
        with open(os.open(name, READ, dir_fd=parent), "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None
            mode = EXECUTABLE if info.st_mode & stat.S_IXUSR else REGULAR
            if info.st_size > room:
                return Found(mode, info.st_size, None)
            data = f.read(room + 1)  # a file that grew meanwhile is cut here, not read on
    except OSError:
        return None
    if len(data) > room:
        return Found(mode, len(data), None)
    return Found(mode, len(data), data, stamp_of(info) if len(data) == info.st_size else None)


def walk(root: int) -> list[bytes]:
    """Every file and link beneath `root`, by path, without git (which a FIFO where it reads
    holds up), and so without ignore rules; but as git does, no `.git`, no folder holding one
    (another repository: git checks it is one, this takes any as one), nor the top `.outputs`.
    A stack, not recursion: a folder may be nested thousands deep."""
    found = []
    pending: list[list[bytes]] = [[]]
    while pending:
        names = pending.pop()
        try:
            with folder(root, names) as here, os.scandir(here) as listed:
                entries = list(listed)
        except OSError:
            continue  # gone or replaced since it was listed: not in the checkpoint
        if names and any(e.name == ".git" for e in entries):
            continue
        for entry in entries:
            name = os.fsencode(entry.name)
            if name == b".git" or (not names and name == b".outputs"):
                continue
            if entry.is_dir(follow_symlinks=False):
                pending.append([*names, name])
            elif entry.is_file(follow_symlinks=False) or entry.is_symlink():
                found.append(b"/".join((*names, name)))
    return sorted(found)


def _kind(root: int, path: list[bytes]) -> int | None:
    try:
        with folder(root, path[:-1]) as parent:
            return stat.S_IFMT(os.stat(path[-1], dir_fd=parent, follow_symlinks=False).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None


def move_aside(root: int, path: bytes, aside: int) -> bool:
    """Whatever is at `path` (file, link, folder, FIFO) renamed to the same path beneath the
    folder `aside`, never deleted; False where nothing is. A folder whose place there an earlier
    move already took (its listed files went first) is merged into it entry by entry."""
    moved, pending, merged = False, [path], []
    while pending:
        at = pending.pop()
        outcome = _move(root, at, aside)
        if isinstance(outcome, list):
            pending += outcome
            merged.append(at)
        moved = moved or outcome is not False
    for at in reversed(merged):  # deepest first: each is empty once its entries have moved
        *parents, name = at.split(b"/")
        with folder(root, parents) as parent:
            os.rmdir(name, dir_fd=parent)
    return moved


def _move(root: int, path: bytes, aside: int) -> bool | list[bytes]:
    """True: moved; False: nothing there; a list: a folder to merge, its entries' paths."""
    *parents, name = path.split(b"/")
    try:
        with folder(root, parents) as parent:
            kind = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
            with folder(aside, parents, create=True) as there:
                try:
                    taken = os.stat(name, dir_fd=there, follow_symlinks=False).st_mode
                except FileNotFoundError:
                    _rename(parent, name, there)
                    return True
                if not (stat.S_ISDIR(kind) and stat.S_ISDIR(taken)):
                    # A rename would replace what was moved there before: that is deleting.
                    raise FileExistsError(errno.EEXIST, "already moved aside", os.fsdecode(path))
                with folder(parent, [name]) as inner:
                    return [b"%s/%s" % (path, os.fsencode(e)) for e in os.listdir(inner)]
    except (FileNotFoundError, NotADirectoryError):
        return False


def _rename(parent: int, name: bytes, there: int) -> None:
    try:
        os.rename(name, name, src_dir_fd=parent, dst_dir_fd=there)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        _carry(parent, name, there)


def clear_way(root: int, path: bytes, aside: int) -> list[bytes]:
    """Move aside what stands where `path` is to be written: a link or file in place of one of
    its folders, anything at its name. The paths moved."""
    names = path.split(b"/")
    moved = []
    for depth in range(1, len(names)):
        kind = _kind(root, names[:depth])
        if kind is None:
            break
        if kind != stat.S_IFDIR:
            prefix = b"/".join(names[:depth])
            if move_aside(root, prefix, aside):
                moved.append(prefix)
            break
    if move_aside(root, path, aside):
        moved.append(path)
    return moved


def write_entry(root: int, path: bytes, mode: str, data: bytes) -> None:
    """A new file (or link) at `path`, whose name nothing holds (`clear_way`)."""
    *parents, name = path.split(b"/")
    with folder(root, parents, create=True) as parent:
        if mode == LINK:
            os.symlink(data, name, dir_fd=parent)
            return
        with open(os.open(name, WRITE, 0o600, dir_fd=parent), "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), 0o755 if mode == EXECUTABLE else 0o644)


def prune(root: int, path: bytes) -> None:
    """Remove the folders on the way to `path` that are empty now, deepest first."""
    names = path.split(b"/")[:-1]
    while names:
        try:
            with folder(root, names[:-1]) as parent:
                os.rmdir(names[-1], dir_fd=parent)
        except OSError:
            return
        names = names[:-1]


def _carry(source: int, name: bytes, target: int) -> None:
    """`name` copied from the folder `source` to the folder `target` on another file system,
    then removed from `source`: only what was copied, so a file made there meanwhile is never
    removed without a copy (the move stops instead)."""
    copied: list[tuple[bytes, os.stat_result]] = []
    pending = [name]
    while pending:
        at = pending.pop()
        *parents, leaf = at.split(b"/")
        with folder(source, parents) as src, folder(target, parents) as dst:
            info = os.stat(leaf, dir_fd=src, follow_symlinks=False)
            pending += _copy(src, leaf, info, dst, at)
        copied.append((at, info))
    for at, info in reversed(copied):  # a folder's entries before the folder
        *parents, leaf = at.split(b"/")
        with folder(source, parents) as src:
            now = os.stat(leaf, dir_fd=src, follow_symlinks=False)
            if (now.st_ino, now.st_dev) != (info.st_ino, info.st_dev):
                raise OSError(errno.EBUSY, "replaced while it was moved aside", os.fsdecode(at))
            if stat.S_ISDIR(info.st_mode):
                os.rmdir(leaf, dir_fd=src)
            else:
                os.unlink(leaf, dir_fd=src)


def _copy(source: int, name: bytes, info: os.stat_result, target: int, at: bytes) -> list[bytes]:
    """One entry copied (a folder made empty); the paths of a folder's entries, to copy next."""
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(name, dir_fd=source), name, dir_fd=target)
    elif stat.S_ISDIR(info.st_mode):
        os.mkdir(name, 0o700, dir_fd=target)
        with folder(source, [name]) as inner:
            return [b"%s/%s" % (at, os.fsencode(e)) for e in os.listdir(inner)]
    elif stat.S_ISREG(info.st_mode):
        with (
            open(os.open(name, READ, dir_fd=source), "rb") as f,
            open(os.open(name, WRITE, info.st_mode & 0o777, dir_fd=target), "wb") as out,
        ):
            shutil.copyfileobj(f, out)
    elif stat.S_ISFIFO(info.st_mode):
        os.mkfifo(name, dir_fd=target)
    else:
        raise OSError(errno.EXDEV, "a device or socket cannot move to another file system", name)
    return []
