"""The C library, bound once for the calls Python does not offer (Landlock, namespaces,
capabilities, seccomp, openat2, rlimits in a child about to exec). `syscall` and `prctl` take
their arguments as each caller passes them; a caller that declares `argtypes` takes a function
object of its own (`libc["syscall"]`), so that it binds no one else."""

from __future__ import annotations

import ctypes

libc = ctypes.CDLL(None, use_errno=True)
syscall = libc.syscall
syscall.restype = ctypes.c_long
prctl = libc.prctl
prctl.restype = ctypes.c_int
