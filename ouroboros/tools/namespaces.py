"""A command's own view of the machine: namespaces made once a run, joined by each command
between fork and exec.

Landlock confines what a command may write into files, not what it may do to their metadata:
`chmod`, `chown`, `chattr`, xattrs and `touch -d` on files outside the workspace pass it. A mount
namespace stops them: every mount read-only (`mount_setattr`, recursively), the workspace and the
private temporary folder bound onto themselves first and left writable. With `tools.network =
false`, a network namespace too, with only loopback up: no UDP, TCP, ICMP or packet socket
reaches anything outside it; a server a command starts on localhost is reachable from the run's
later commands, as it would be without.

`build` makes them in a short-lived process (`make`) and keeps them open by their /proc files;
each command joins them (`enter`, a few `setns` calls): a namespace of its own per command would
cost one more millisecond or two, most of it tearing its mounts down at exit. As root they are
made directly; as a user, inside a user namespace mapping the user to itself, and each command
makes one more of its own inside it, so that its RLIMIT_NPROC counts its own processes only (the
capabilities a user namespace gives are dropped by `privileges.py` before the command runs).
Where the kernel or a container refuses them, `build` says which step failed, and commands run
without.

Hand-written rather than bubblewrap: bubblewrap execs the command itself, so Landlock (which
forbids mount changes once applied) could only come after it through one more exec per command,
and `bwrap` alone (the same read-only view, a network namespace, capabilities dropped) costs
about 5 ms more a command than the command itself, measured here; all of this confinement,
Landlock included, costs 0.65 ms (`bench/tools.py`).
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ouroboros.tools.child_exit import (
    BIND,
    CWD,
    FAILED_STEPS,
    ID_MAPS,
    JOIN,
    LOOPBACK,
    PRIVATE,
    READ_ONLY,
    UNSHARE,
)
from ouroboros.tools.libc import libc
from ouroboros.tools.libc import syscall as _syscall

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 1 << 18
_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
"""mount_setattr(2) has the same number on every architecture (Linux 5.12 and later)."""
_SIOCSIFFLAGS, _IFF_UP_LOOPBACK_RUNNING = 0x8914, 0x1 | 0x8 | 0x40
_AF_INET, _SOCK_DGRAM = 2, 2


_unshare, _setns, _mount, _chdir = libc.unshare, libc.setns, libc.mount, libc.chdir
_openat, _write, _close = libc.openat, libc.write, libc.close
_socket, _ioctl = libc.socket, libc.ioctl


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


def _id_maps(as_user: bool) -> tuple[tuple[bytes, bytes], ...]:
    """(file under /proc, line) to write in a user namespace: the user and group mapped to
    themselves."""
    if not as_user:
        return ()
    uid, gid = os.geteuid(), os.getegid()
    return (
        (b"self/setgroups", b"deny"),
        (b"self/uid_map", b"%d %d 1" % (uid, uid)),
        (b"self/gid_map", b"%d %d 1" % (gid, gid)),
    )


@dataclass
class Isolation:
    """Built before fork; `enter` runs in the child, with pre-bound calls only."""

    writable: list[Path]
    network: bool
    """False: a network namespace with loopback only."""
    as_user: bool = field(default_factory=lambda: os.geteuid() != 0)
    """Not root: the namespaces are made inside a user namespace of the user's own."""

    def __post_init__(self) -> None:
        self._writable = [bytes(p.resolve()) for p in self.writable]
        self._flags = _CLONE_NEWNS | (0 if self.network else _CLONE_NEWNET)
        self._flags |= _CLONE_NEWUSER if self.as_user else 0
        self._maps = _id_maps(self.as_user)
        self._read_only = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
        self._writable_again = _MountAttr(0, _MOUNT_ATTR_RDONLY, 0, 0)
        self._attr_size = ctypes.sizeof(_MountAttr)
        self._joins: list[tuple[int, int]] = []
        self._proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        """The maps are written through it: /proc is read-only in the run's view."""
        self._loopback = ctypes.create_string_buffer(
            b"lo".ljust(16, b"\0") + struct.pack("=h", _IFF_UP_LOOPBACK_RUNNING).ljust(24, b"\0")
        )

    def make(self) -> None:
        """In the process that makes the run's namespaces: into new ones, the view made
        read-only but the writable folders, loopback up; the exit status says which step
        failed."""
        if _unshare(self._flags) != 0:
            os._exit(UNSHARE)
        self._map_ids()
        self._read_only_view()
        if not self.network:
            fd = _socket(_AF_INET, _SOCK_DGRAM, 0)
            if fd < 0 or _ioctl(fd, _SIOCSIFFLAGS, self._loopback) != 0:
                os._exit(LOOPBACK)
            _close(fd)

    def hold(self, pid: int) -> None:
        """Keep the namespaces `pid` made (it may end then): their files, in the order a
        command joins them, the user namespace first."""
        kinds = [("user", _CLONE_NEWUSER)] if self.as_user else []
        kinds.append(("mnt", _CLONE_NEWNS))
        kinds += [] if self.network else [("net", _CLONE_NEWNET)]
        for name, kind in kinds:
            self._joins.append(
                (os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC), kind)
            )

    def enter(self, cwd: bytes) -> None:
        """In a command's child: join the run's namespaces (as a user, then one more user
        namespace of its own), back into `cwd` through the writable view."""
        for fd, kind in self._joins:
            if _setns(fd, kind) != 0:
                os._exit(JOIN)
        if self.as_user:
            if _unshare(_CLONE_NEWUSER) != 0:
                os._exit(UNSHARE)
            self._map_ids()
        if _chdir(cwd) != 0:  # joining a mount namespace moved it to that namespace's root
            os._exit(CWD)

    def close(self) -> None:
        for fd, _ in self._joins:
            os.close(fd)
        self._joins.clear()
        if self._proc >= 0:
            os.close(self._proc)
            self._proc = -1

    def _map_ids(self) -> None:
        for path, line in self._maps:
            fd = _openat(self._proc, path, os.O_WRONLY)
            if fd < 0 or _write(fd, line, len(line)) != len(line):
                os._exit(ID_MAPS)
            _close(fd)

    def _read_only_view(self) -> None:
        """Private mounts (nothing propagates back out), the writable folders bound onto
        themselves, everything read-only, then the bound folders writable again."""
        if _mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            os._exit(PRIVATE)
        for path in self._writable:
            if _mount(path, path, None, _MS_BIND | _MS_REC, None) != 0:
                os._exit(BIND)
        read_only = ctypes.byref(self._read_only)
        if _syscall(_MOUNT_SETATTR, _AT_FDCWD, b"/", _AT_RECURSIVE, read_only, self._attr_size):
            os._exit(READ_ONLY)
        writable = ctypes.byref(self._writable_again)
        for path in self._writable:
            if _syscall(_MOUNT_SETATTR, _AT_FDCWD, path, _AT_RECURSIVE, writable, self._attr_size):
                os._exit(READ_ONLY)

    @property
    def summary(self) -> str:
        network = ", network: loopback only" if not self.network else ""
        user = " (in a user namespace)" if self.as_user else ""
        return f"read-only outside the writable folders{network}{user}"


def build(writable: list[Path], network: bool) -> tuple[Isolation | None, str]:
    """The run's namespaces, made and tried once on `true`; None and why where refused. Root
    without the privilege to make them (in a container) tries inside a user namespace too."""
    first = Isolation(writable, network)
    made, why = _make(first)
    if made is None and not first.as_user:
        made, _ = _make(Isolation(writable, network, as_user=True))
    return (made, made.summary) if made else (None, f"no namespaces ({why})")


def _make(isolation: Isolation) -> tuple[Isolation | None, str]:
    try:
        maker = subprocess.Popen(
            ["sleep", "60"],
            preexec_fn=isolation.make,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:
        isolation.close()
        return None, str(e.strerror)
    try:
        isolation.hold(maker.pid)
    except OSError:
        isolation.close()  # it failed before its exec: its status says where
    finally:
        maker.kill()
    made = maker.wait()
    if made != -9:
        isolation.close()
        return None, FAILED_STEPS.get(made, "sleep failed")
    tried = subprocess.run(["true"], preexec_fn=lambda: isolation.enter(b"/"), check=False)
    if tried.returncode != 0:
        isolation.close()
        return None, FAILED_STEPS.get(tried.returncode, "true failed")
    return isolation, ""
