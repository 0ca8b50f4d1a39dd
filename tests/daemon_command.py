"""A server command that leaves the process the run started, as daemons do:

    python tests/daemon_command.py HOW PIDFILE PORT TURNS

runs `tests/scripted_command.py PORT TURNS` in a process that left: `double-fork` (fork,
setsid, fork again, both parents exit 0: the server's parent is gone at once) or `setsid` (a
child in a session of its own; the command waits for it, as `setsid -f` and a shell's `&` do
not). The server's pid is written to PIDFILE once it runs, for the test to watch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SERVER = str(Path(__file__).with_name("scripted_command.py"))


def serve(pidfile: str, port: str, turns: str) -> None:
    Path(pidfile).write_text(f"{os.getpid()}\n")
    os.execv(sys.executable, [sys.executable, SERVER, port, turns])


def main() -> None:
    how, pidfile, port, turns = sys.argv[1:5]
    if how == "double-fork":
        if os.fork():
            os._exit(0)
        os.setsid()
        if os.fork():
            os._exit(0)
        serve(pidfile, port, turns)
    child = os.fork()
    if child == 0:
        os.setsid()
        serve(pidfile, port, turns)
    os.waitpid(child, 0)


if __name__ == "__main__":
    main()
