"""Kernel-enforced confinement of shell commands with Landlock (Linux 5.13 and later).

The harness builds one ruleset when the run starts; each `shell_exec` child applies it to itself
between fork and exec (`confine`), so only the command is confined, never the harness. What a
confined command may do:
- write (create, delete, rename, truncate) only inside the workspace and a private temporary
  folder (and to /dev/null, /dev/zero, /dev/full, /dev/tty);
- read and execute anywhere it is allowed to read (`tools.readable`, `/` by default), except the
  state folder, which it can neither read nor write: the path from `/` to it is granted entry by
  entry, leaving the state folder out, so listing the folders on that path is refused too;
- with `tools.network = false`, open no TCP connection (ABI 4 and later) where no network
  namespace does better;
- signal no process outside its own (its children), nor reach abstract Unix sockets outside it
  (ABI 6 and later): `kill -9 -1` cannot reach the harness;
- make no device node anywhere, nor use a device's ioctls (ABI 5 and later): no keystrokes
  typed into a terminal (TIOCSTI), no loop device over a file outside.

Around the ruleset, in the same child: its own namespaces (`namespaces.py`: read-only outside
the writable folders, and loopback only with `tools.network = false`), no socket but IP and
netlink with `tools.network = false` (`seccomp.py`), and no capability (`privileges.py`).

Three system calls and a prctl, through ctypes: the bindings on the package registry are a
development release without network rules or scopes.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

from ouroboros.tools import namespaces
from ouroboros.tools.child_exit import LANDLOCK, NO_NEW_PRIVS, SOCKET_FILTER
from ouroboros.tools.libc import prctl as _prctl
from ouroboros.tools.libc import syscall as _syscall
from ouroboros.tools.namespaces import Isolation
from ouroboros.tools.privileges import CapabilityDrop, holds_setpcap
from ouroboros.tools.seccomp import SocketFilter, socket_filter

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
"""The same numbers on every architecture Linux gives Landlock."""
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_AND_REMOVE = sum(1 << bit for bit in range(4, 13))
"""remove dir/file, make char/dir/reg/sock/fifo/block/sym."""
MAKE_CHAR, MAKE_BLOCK = 1 << 6, 1 << 11
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NEVER_GRANTED = MAKE_CHAR | MAKE_BLOCK | IOCTL_DEV
"""Handled, so refused wherever no rule grants them, and granted by none."""
CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
READ = EXECUTE | READ_FILE | READ_DIR
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class SandboxError(Exception):
    """Landlock is not there or refused the ruleset; the message says what to do."""


def abi_version() -> int:
    """The Landlock ABI the kernel offers; 0 when it has none (or it is disabled)."""
    version = _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(int(version), 0)


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise SandboxError(f"Landlock refused to {what}: {os.strerror(errno)}")
    return result


def _fs_rights(abi: int) -> int:
    rights = READ | WRITE_FILE | _MAKE_AND_REMOVE
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def readable_paths(roots: list[Path], hidden: Path) -> list[Path]:
    """`roots`, except that `hidden` and what is under it are left out: where a root holds
    it, every entry on the way down is listed instead, but the one leading to it. A rule
    follows a symbolic link to its target, so a link that leads back above `hidden` (pytest's
    `pytest-current`, a `latest` link) is left out too."""
    hidden = hidden.resolve()
    paths: list[Path] = []
    for root in (r.resolve() for r in roots):
        if not hidden.is_relative_to(root):
            paths.append(root)
            continue
        folder = root
        for part in hidden.relative_to(root).parts:
            try:
                entries = sorted(folder.iterdir())
            except OSError:
                entries = []
            paths.extend(e for e in entries if e.name != part and not _leads_to(e, hidden))
            folder = folder / part
    return paths


def _leads_to(entry: Path, hidden: Path) -> bool:
    try:
        return entry.is_symlink() and hidden.is_relative_to(entry.resolve())
    except (OSError, RuntimeError):  # a broken or looping link grants nothing anyway
        return False


@dataclass(frozen=True)
class Confinement:
    """A Landlock ruleset built once, with what goes around it; `confine` applies them in a
    child about to exec."""

    fd: int | None
    """The Landlock ruleset; None on a kernel without Landlock, where the rest still holds."""
    abi: int
    isolation: Isolation | None
    sockets: SocketFilter | None
    """Refuses every socket but IP and netlink (`tools.network = false`)."""
    capabilities: CapabilityDrop
    summary: str
    """What holds, as the `tools` event says it."""
    gaps: list[str]
    """What does not hold on this machine, said as warnings at start (and so in `status`)."""

    def confine(self, cwd: bytes) -> None:
        """Run in the child between fork and exec: the namespaces (mounts need the privileges
        dropped after and are refused under Landlock), no new privileges, the socket filter,
        the ruleset, then no capability. Only pre-bound calls here, no imports, no allocation
        worth the name."""
        if self.isolation is not None:
            self.isolation.enter(cwd)
        if _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            os._exit(NO_NEW_PRIVS)
        if self.sockets is not None and not self.sockets.install():
            os._exit(SOCKET_FILTER)
        if self.fd is not None and _syscall(_RESTRICT_SELF, self.fd, 0) != 0:
            os._exit(LANDLOCK)
        self.capabilities.drop()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        if self.isolation is not None:
            self.isolation.close()


def build(
    writable: list[Path],
    readable: list[Path],
    hidden: Path,
    network: bool,
    landlock_required: bool = False,
    abi: int | None = None,
) -> Confinement:
    """The ruleset for a command: write in `writable`, read in `readable` but `hidden`; what
    holds without Landlock (namespaces, the socket filter, no capabilities) where the kernel
    has none, unless it is required. `abi`: the kernel's, unless given (tests)."""
    abi = abi_version() if abi is None else abi
    if abi == 0 and landlock_required:
        raise SandboxError(
            "this kernel has no Landlock (Linux 5.13 or later, with landlock in the lsm= boot "
            'list): set tools.sandbox = "auto" to confine commands with what it has'
        )
    isolation, isolated = namespaces.build(writable, network)
    fd = _ruleset(abi, writable, readable, hidden, network, isolation) if abi else None
    sockets = None if network else socket_filter()
    own_user_namespace = isolation is not None and isolation.as_user
    drop = CapabilityDrop(bounding=own_user_namespace or holds_setpcap())
    filtered = sockets is not None
    summary = _summary(abi, isolated, filtered)
    gaps = _gaps(abi, isolated, isolation is not None, network, filtered)
    return Confinement(fd, abi, isolation, sockets, drop, summary, gaps)


def _ruleset(
    abi: int,
    writable: list[Path],
    readable: list[Path],
    hidden: Path,
    network: bool,
    isolation: Isolation | None,
) -> int:
    """The Landlock ruleset's descriptor."""
    handled = _fs_rights(abi)
    # Inside a network namespace TCP reaches only the command's own loopback: let it connect.
    tcp_refused = abi >= 4 and not network and isolation is None
    attr = _RulesetAttr(handled, CONNECT_TCP if tcp_refused else 0)
    size = ctypes.sizeof(ctypes.c_uint64) * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    fd = _check(_syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0), "start")
    try:
        for path in readable_paths(readable, hidden):
            _allow(fd, path, READ & handled)
        for path in writable:
            _allow(fd, path, handled & ~NEVER_GRANTED)
        for device in DEVICES:
            _allow(fd, Path(device), (READ_FILE | WRITE_FILE) & handled)
    except BaseException:
        os.close(fd)
        raise
    return int(fd)


def _summary(abi: int, isolated: str, sockets: bool) -> str:
    """What holds: `Landlock ABI 7; read-only outside ...; no socket but IP and netlink; no
    capabilities`."""
    landlock = f"Landlock ABI {abi}" if abi else "no Landlock"
    parts = [landlock, isolated] + (["no socket but IP and netlink"] if sockets else [])
    return "; ".join([*parts, "no capabilities"])


def _gaps(abi: int, isolated: str, isolation: bool, network: bool, sockets: bool) -> list[str]:
    """What does not hold on this machine, each said as a warning at start."""
    gaps = []
    if not abi:
        gaps.append(
            "this kernel has no Landlock (Linux 5.13 or later, with landlock in the lsm= boot "
            "list): the state folder is readable, and writes outside the workspace are refused "
            "only by the read-only view" + ("" if isolation else ", which is missing too")
        )
    if not isolation:
        network_too = "" if network else "; nor is UDP, ICMP or a packet socket"
        gaps.append(
            f"{isolated}: chmod, chown, xattrs and times of files outside the workspace are "
            f"not refused{network_too}"
        )
    if not network and not sockets:
        gaps.append("Unix sockets are not refused (no socket filter for this machine)")
    if not network and abi < 4 and not isolation:
        gaps.append("TCP is not refused either (Landlock ABI < 4 and no network namespace)")
    if abi < 5:
        gaps.append("device ioctls are not refused (Landlock ABI < 5): capabilities dropped only")
    return gaps


def _allow(fd: int, path: Path, rights: int) -> None:
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone, or not ours to see: nothing to grant
    try:
        if not os.path.isdir(path):
            rights &= FILE_ONLY
        rule = _PathBeneath(rights, target)
        result = _syscall(_ADD_RULE, fd, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
        _check(int(result), f"allow {path}")
    finally:
        os.close(target)
