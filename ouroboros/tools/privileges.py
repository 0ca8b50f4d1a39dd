"""Every capability a command could hold, dropped in the child before it runs the command.

Root's commands would otherwise keep all of root's capabilities: inject keystrokes into a
terminal (TIOCSTI), make device nodes, chown and chmod anything, load kernel modules. A user's
commands hold none, except inside the user namespace `namespaces.py` makes, where they hold all
of them over it until dropped here. Dropped: the bounding set (what an exec could give back, root
gets it all on exec), the ambient set, then effective, permitted and inheritable (`capset`).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from pathlib import Path

from ouroboros.tools.child_exit import CAPABILITIES
from ouroboros.tools.libc import libc
from ouroboros.tools.libc import prctl as _prctl

_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAP_SETPCAP = 8
_CAPABILITY_VERSION_3 = 0x20080522

_capset = libc.capset
_capset.restype = ctypes.c_int


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def last_capability() -> int:
    """The highest capability number this kernel knows (40 in Linux 6.x)."""
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40  # CAP_CHECKPOINT_RESTORE, the last one as of Linux 6.x


def holds_setpcap() -> bool:
    """Whether this process may drop capabilities from its bounding set (a container's root may
    not: its runtime can take CAP_SETPCAP away)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> _CAP_SETPCAP & 1)
    return False


@dataclass
class CapabilityDrop:
    """Built before fork; `drop` runs in the child with pre-bound calls only."""

    bounding: bool
    """Whether the child may drop the bounding set (it holds CAP_SETPCAP: root, or anyone in a
    user namespace of its own). Without it, no_new_privs alone keeps an exec from giving back
    what `capset` dropped."""
    last: int = field(default_factory=last_capability)
    _header: _CapHeader = field(default_factory=lambda: _CapHeader(_CAPABILITY_VERSION_3, 0))
    _data: ctypes.Array[_CapData] = field(default_factory=lambda: (_CapData * 2)())

    def drop(self) -> None:
        if self.bounding:
            for capability in range(self.last + 1):
                if _prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                    os._exit(CAPABILITIES)
        _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # fails only without it
        if _capset(ctypes.byref(self._header), self._data) != 0:
            os._exit(CAPABILITIES)
