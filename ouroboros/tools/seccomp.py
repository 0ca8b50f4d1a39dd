"""With `tools.network = false`, no socket but IP (inside the command's network namespace, where
only loopback exists) and netlink: a seccomp filter installed in the child before exec.

A network namespace stops every socket that needs an interface, but not a Unix socket bound to
a path: `/run/docker.sock`, `$SSH_AUTH_SOCK`, a database's socket are as reachable from a new
network namespace as from the old one, and a read-only mount does not stop a connect. So every
other address family is refused at `socket()` (`EACCES`), Unix included (`socketpair` still
works: it reaches nothing outside the command), and so is `io_uring_setup`, which could make a
socket without the system call. 32-bit programs on a 64-bit kernel are refused their socket
calls altogether (the filter reads the 64-bit numbers).
"""

from __future__ import annotations

import ctypes
import platform
from dataclasses import dataclass

from ouroboros.tools.libc import prctl as _prctl

_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_LOAD, _JUMP_IF_EQUAL, _RETURN = 0x20, 0x15, 0x06
_ALLOW, _REFUSE = 0x7FFF0000, 0x00050000 | 13
"""SECCOMP_RET_ALLOW; SECCOMP_RET_ERRNO with EACCES."""
_ARCH, _NUMBER, _FIRST_ARGUMENT = 4, 0, 16
"""Offsets in struct seccomp_data (the low half of args[0] on a little-endian machine)."""
_X32 = 0x40000000
_ALLOWED_FAMILIES = (2, 10, 16)
"""AF_INET, AF_INET6, AF_NETLINK."""
_IO_URING_SETUP = 425


@dataclass(frozen=True)
class _Machine:
    arch: int
    socket: int
    x32: bool
    compat_arch: int
    compat_refused: tuple[int, ...]
    """socketcall, socket and io_uring_setup of the 32-bit ABI."""


_MACHINES = {
    "x86_64": _Machine(0xC000003E, 41, True, 0x40000003, (102, 359, _IO_URING_SETUP)),
    "aarch64": _Machine(0xC00000B7, 198, False, 0x40000028, (102, 281, _IO_URING_SETUP)),
}


class _Instruction(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    )


class _Program(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction)))


Step = tuple[int, int, str, str]
"""(code, k, label to jump to when equal, label when not); "" goes on to the next step."""


def _steps(machine: _Machine) -> list[tuple[str, Step]]:
    numbers = [machine.socket] + ([machine.socket | _X32] if machine.x32 else [])
    uring = [_IO_URING_SETUP] + ([_IO_URING_SETUP | _X32] if machine.x32 else [])
    steps: list[tuple[str, Step]] = [
        ("", (_LOAD, _ARCH, "", "")),
        ("", (_JUMP_IF_EQUAL, machine.arch, "", "compat")),
        ("", (_LOAD, _NUMBER, "", "")),
    ]
    steps += [("", (_JUMP_IF_EQUAL, n, "refuse", "")) for n in uring]
    steps += [("", (_JUMP_IF_EQUAL, n, "family", "")) for n in numbers]
    steps += [
        ("", (_RETURN, _ALLOW, "", "")),
        ("family", (_LOAD, _FIRST_ARGUMENT, "", "")),
    ]
    steps += [("", (_JUMP_IF_EQUAL, family, "allow", "")) for family in _ALLOWED_FAMILIES]
    steps += [
        ("refuse", (_RETURN, _REFUSE, "", "")),
        ("compat", (_JUMP_IF_EQUAL, machine.compat_arch, "", "allow")),
        ("", (_LOAD, _NUMBER, "", "")),
    ]
    steps += [("", (_JUMP_IF_EQUAL, n, "refuse 32-bit", "")) for n in machine.compat_refused]
    steps += [
        ("allow", (_RETURN, _ALLOW, "", "")),
        ("refuse 32-bit", (_RETURN, _REFUSE, "", "")),  # classic BPF jumps only forward
    ]
    return steps


def _assemble(steps: list[tuple[str, Step]]) -> ctypes.Array[_Instruction]:
    where = {label: i for i, (label, _) in enumerate(steps) if label}
    program = (_Instruction * len(steps))()
    for i, (_, (code, k, if_equal, if_not)) in enumerate(steps):
        jt = where[if_equal] - i - 1 if if_equal else 0
        jf = where[if_not] - i - 1 if if_not else 0
        program[i] = _Instruction(code, jt, jf, k)
    return program


@dataclass
class SocketFilter:
    """Built before fork; `install` runs in the child (after no_new_privs)."""

    machine: _Machine

    def __post_init__(self) -> None:
        self._instructions = _assemble(_steps(self.machine))
        self._program = _Program(len(self._instructions), self._instructions)

    def install(self) -> bool:
        program = ctypes.byref(self._program)
        return bool(_prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, program, 0, 0) == 0)


def socket_filter() -> SocketFilter | None:
    """The filter for this machine; None where its system call numbers are not known here."""
    machine = _MACHINES.get(platform.machine())
    return SocketFilter(machine) if machine else None
