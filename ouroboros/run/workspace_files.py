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
    """None: larger than the room it was given, so not read."""


def read_entry(root: int, path: bytes, room: int) -> Found | None:
    """The file or link at `path` (a link's target, never what it points to); None for
    anything else, or where it is gone or a link stands on the way to it."""
    *parents, name = path.split(b"/")
    try:
        with folder(root, parents) as parent:
            kind = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
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
    return Found(mode, len(data), data if len(data) <= room else None)


def walk(root: int, names: tuple[bytes, ...] = ()) -> list[bytes]:
    """Every file and link beneath `root` but `.git` and the top `.outputs`, by path, without
    git (which a FIFO where it reads holds up): no ignore rules."""
    found = []
    with folder(root, list(names)) as here:
        for name in sorted(os.fsencode(n) for n in os.listdir(here)):
            if name == b".git" or (not names and name == b".outputs"):
                continue
            kind = os.stat(name, dir_fd=here, follow_symlinks=False).st_mode
            if stat.S_ISDIR(kind):
                found += walk(root, (*names, name))
            elif stat.S_ISREG(kind) or stat.S_ISLNK(kind):
                found.append(b"/".join((*names, name)))
    return found


def _kind(root: int, path: list[bytes]) -> int | None:
    try:
        with folder(root, path[:-1]) as parent:
            return stat.S_IFMT(os.stat(path[-1], dir_fd=parent, follow_symlinks=False).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None


def move_aside(root: int, path: bytes, aside: int) -> bool:
    """Whatever is at `path` (file, link, folder, FIFO) renamed to the same path beneath the
    folder `aside`, never deleted; False where nothing is."""
    *parents, name = path.split(b"/")
    try:
        with folder(root, parents) as parent:
            os.stat(name, dir_fd=parent, follow_symlinks=False)
            with folder(aside, parents, create=True) as there:
                try:
                    os.rename(name, name, src_dir_fd=parent, dst_dir_fd=there)
                except OSError as e:
                    if e.errno != errno.EXDEV:
                        raise
                    _copy(parent, name, there)  # another file system: copied, then removed
                    _remove(parent, name)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


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


def _copy(source: int, name: bytes, target: int) -> None:
    info = os.stat(name, dir_fd=source, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(name, dir_fd=source), name, dir_fd=target)
    elif stat.S_ISDIR(info.st_mode):
        os.mkdir(name, 0o700, dir_fd=target)
        with folder(source, [name]) as inner, folder(target, [name]) as copy:
            for entry in os.listdir(inner):
                _copy(inner, os.fsencode(entry), copy)
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


def _remove(source: int, name: bytes) -> None:
    if stat.S_ISDIR(os.stat(name, dir_fd=source, follow_symlinks=False).st_mode):
        with folder(source, [name]) as inner:
            for entry in os.listdir(inner):
                _remove(inner, os.fsencode(entry))
        os.rmdir(name, dir_fd=source)
    else:
        os.unlink(name, dir_fd=source)
