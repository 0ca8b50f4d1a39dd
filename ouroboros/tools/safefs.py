"""Every harness-side access beneath the workspace: opened relative to a folder's descriptor,
never through a symbolic link, never out of the tree, then worked on through that descriptor.

The agent's commands can plant anything in the workspace, and the harness (which nobody
confines) must not do their bidding: a link at a temporary file's name, a `.outputs` that is a
link out, a folder swapped for a link between a check and an open. So no path here is checked
and then opened again by name. It is opened once: by `openat2(2)` with RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS where the kernel has it (Linux 5.6+), else one name
at a time with O_NOFOLLOW. `..` never reaches the kernel (`Workspace.locate` resolved it by the
words). A link is refused even when it points inside the workspace: the message names it and its
target, so the agent can name the target instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import secrets
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ouroboros.tools.libc import libc
from ouroboros.tools.workspace import Location, PathRefused

USE_OPENAT2: bool | None = None
"""None: ask the kernel once whether it has openat2; False: always walk name by name (tests set
it to run every case through the walk too)."""

_SYS_OPENAT2 = 437  # one number on every architecture (the unified syscall table)
_RESOLVE = 0x02 | 0x04 | 0x08  # RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFSOCK: "a socket",
}


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_HOW_SIZE = ctypes.sizeof(_OpenHow)


_syscall = libc["syscall"]  # its own: it declares argtypes
_syscall.restype = ctypes.c_long
_syscall.argtypes = [
    ctypes.c_long,
    ctypes.c_long,
    ctypes.c_char_p,
    ctypes.c_void_p,
    ctypes.c_size_t,
]


def _openat2(folder: int, path: str, flags: int, mode: int = 0) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
    fd = _syscall(_SYS_OPENAT2, folder, os.fsencode(path), ctypes.byref(how), _HOW_SIZE)
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(fd)


def kernel_resolves() -> bool:
    """Whether openat2 is used (asked once; a seccomp filter may hide it from a container)."""
    global USE_OPENAT2
    if USE_OPENAT2 is None:
        USE_OPENAT2 = sys.platform == "linux" and _answers()  # 437 is another call elsewhere
    return USE_OPENAT2


def _answers() -> bool:
    try:
        os.close(_openat2(-100, ".", os.O_RDONLY | os.O_DIRECTORY))  # -100: AT_FDCWD
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Entry:
    name: str
    mode: int
    size: int
    target: str | None
    """Where a symbolic link points (shown, never followed)."""


def open_regular(loc: Location) -> int:
    """A descriptor for reading the regular file at `loc`; never blocks on a FIFO or device."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    base = os.open(loc.base, _FOLDER)  # no context manager: every file_read comes here
    try:
        if not loc.parts:
            fd = os.open(".", flags, dir_fd=base)
        elif kernel_resolves():
            fd = _explaining(
                base, loc, loc.parts, lambda: _openat2(base, "/".join(loc.parts), flags)
            )
        else:
            with _folder(base, loc, loc.parts[:-1], create=False) as folder:
                name = loc.name
                fd = _explaining(
                    base,
                    loc,
                    loc.parts,
                    lambda: os.open(name, flags | os.O_NOFOLLOW, dir_fd=folder),
                )
    finally:
        os.close(base)
    kind = stat.S_IFMT(os.fstat(fd).st_mode)
    if kind == stat.S_IFREG:  # where O_NONBLOCK changes nothing
        return fd
    os.close(fd)
    if kind == stat.S_IFDIR:
        raise PathRefused(f"{loc.shown} is a folder; use list_dir")
    raise PathRefused(f"{loc.shown} is not a regular file ({_KINDS.get(kind, 'special')})")


def replace_file(loc: Location, data: bytes, overwrite: bool = True) -> bool:
    """`data` becomes the whole file at `loc`, its folders made as needed: written under an
    unpredictable name beside it, synced, then renamed over it. A rename replaces the name that
    is there (another hard link of an outside file included) and never writes through it.
    False, nothing written: a file is there and `overwrite` is off."""
    with _base(loc) as base, _folder(base, loc, loc.parts[:-1], create=True) as folder:
        kind = _kind(folder, loc.name)
        if kind == stat.S_IFLNK:
            raise _link_refused(loc, "/".join(loc.parts), os.readlink(loc.name, dir_fd=folder))
        if kind == stat.S_IFDIR:
            raise PathRefused(f"{loc.shown} is a folder")
        if kind not in (None, stat.S_IFREG):
            raise PathRefused(f"{loc.shown} is {_KINDS.get(kind or 0, 'special')}, not a file")
        if kind is not None and not overwrite:
            return False
        _write_renamed(folder, loc.name, data)
        return True


def create_file(loc: Location, data: bytes) -> bool:
    """Write `data` at `loc` unless the name is taken (by anything, a dangling link too)."""
    with _base(loc) as base, _folder(base, loc, loc.parts[:-1], create=True) as folder:
        if _kind(folder, loc.name) is not None:
            return False
        _write_renamed(folder, loc.name, data)
        return True


def create_new(loc: Location) -> int:
    """A new empty file at `loc`, open for appending; FileExistsError if the name is taken."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with _base(loc) as base, _folder(base, loc, loc.parts[:-1], create=True) as folder:
        return os.open(loc.name, flags, 0o666, dir_fd=folder)


def entries(loc: Location) -> list[Entry]:
    """The folder at `loc`'s entries, by name; links are shown with their target."""
    with _base(loc) as base, _folder(base, loc, loc.parts, create=False) as folder:
        found = []
        with os.scandir(folder) as listing:
            for entry in listing:
                info = entry.stat(follow_symlinks=False)
                link = stat.S_ISLNK(info.st_mode)
                target = os.readlink(entry.name, dir_fd=folder) if link else None
                found.append(Entry(entry.name, info.st_mode, info.st_size, target))
    return sorted(found, key=lambda e: e.name)


@contextlib.contextmanager
def _base(loc: Location) -> Iterator[int]:
    # The harness chose this folder (the workspace, the system prompt's folder): opened by path.
    fd = os.open(loc.base, _FOLDER)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _folder(base: int, loc: Location, parts: tuple[str, ...], create: bool) -> Iterator[int]:
    """The folder `parts` beneath `base`, made one name at a time where missing if `create`."""
    fd = -1
    if parts and kernel_resolves():
        try:
            fd = _explaining(base, loc, parts, lambda: _openat2(base, "/".join(parts), _FOLDER))
        except FileNotFoundError:
            if not create:
                raise
    if fd == -1:
        fd = os.dup(base)
        for i, name in enumerate(parts):
            try:
                step = _explaining(
                    base, loc, parts[: i + 1], functools.partial(_step, fd, name, create)
                )
            finally:
                os.close(fd)
            fd = step
    try:
        yield fd
    finally:
        os.close(fd)


def _step(folder: int, name: str, create: bool) -> int:
    try:
        return os.open(name, _FOLDER | os.O_NOFOLLOW, dir_fd=folder)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):  # made meanwhile: opened as any other
        os.mkdir(name, 0o777, dir_fd=folder)
    return os.open(name, _FOLDER | os.O_NOFOLLOW, dir_fd=folder)


def _explaining(base: int, loc: Location, parts: tuple[str, ...], opener: Callable[[], int]) -> int:
    """`opener()`, with a refusal that says which link (or file) was in the way."""
    try:
        return opener()
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
            raise
        for i in range(len(parts)):
            prefix = "/".join(parts[: i + 1])
            try:
                target = os.readlink(prefix, dir_fd=base)
            except OSError:  # not a link: the link, if any, is further on
                continue
            raise _link_refused(loc, prefix, target) from None
        if e.errno == errno.ENOTDIR:
            raise PathRefused(f"not a folder: {loc.shown}") from None
        raise


def _link_refused(loc: Location, link: str, target: str) -> PathRefused:
    where = os.path.normpath(os.path.join(loc.base, os.path.dirname(link), target))
    if where.startswith(f"{loc.base}/"):
        hint = f"; name its target {os.path.relpath(where, loc.base)} instead"
    else:
        hint = ", outside the workspace"
    named = loc.shown if link == "/".join(loc.parts) else f"{loc.shown}: {link}"
    return PathRefused(
        f"{named} is a symbolic link to {target[:200]}{hint} (the file tools never follow links)"
    )


def _kind(folder: int, name: str) -> int | None:
    try:
        return stat.S_IFMT(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None


def _write_renamed(folder: int, name: str, data: bytes) -> None:
    # A fresh name nobody can guess, created exclusively: nothing planted can be written through.
    temporary = f".{secrets.token_hex(8)}.ouroboros-tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o666, dir_fd=folder)
    try:
        with open(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(fd)
        os.rename(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        raise
