"""The exit statuses of a command's child when a step of its set-up between fork and exec
fails: the command never ran. One table, so that the harness can say which step failed (at
start, where it tries one command, and in a result) instead of a bare exit 126."""

from __future__ import annotations

MEMORY_LIMIT, PROCESS_LIMIT, NO_NEW_PRIVS, SOCKET_FILTER, LANDLOCK = 112, 113, 114, 115, 116
JOIN, UNSHARE, ID_MAPS, PRIVATE, BIND, READ_ONLY, LOOPBACK, CWD = range(117, 125)
CAPABILITIES = 125

FAILED_STEPS = {
    MEMORY_LIMIT: "the memory limit could not be set (tools.max_memory_mb)",
    PROCESS_LIMIT: "the process limit could not be set (tools.max_processes)",
    NO_NEW_PRIVS: "no_new_privs could not be set",
    SOCKET_FILTER: "the socket filter (seccomp) could not be installed",
    LANDLOCK: "Landlock refused the ruleset",
    JOIN: "the run's namespaces could not be joined",
    UNSHARE: "unshare refused",
    ID_MAPS: "the user namespace's id maps could not be written",
    PRIVATE: "mounts could not be made private",
    BIND: "a writable folder could not be bound",
    READ_ONLY: "mount_setattr refused (Linux 5.12 or later)",
    LOOPBACK: "loopback could not be brought up",
    CWD: "the working folder is gone",
    CAPABILITIES: "the capabilities could not be dropped",
}
"""The child's exit status when a step fails, and what it means."""


def failed_step(code: int | None, output: bytes) -> str | None:
    """The set-up step a command's exit status says failed (it printed nothing: it never ran)."""
    return FAILED_STEPS.get(code) if code is not None and not output else None
