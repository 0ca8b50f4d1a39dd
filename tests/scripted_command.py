"""The scripted loopback server as a command, for runs whose `[server] command` starts it:

    python tests/scripted_command.py PORT TURNS

serves a conversation of TURNS replies (`echo` calls, then `finish`), each chosen by how many
replies the request already holds, so a server started again goes on where the run is.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

from ouroboros.model.scripted import Reply, ScriptedServer, tool


def replies_so_far(body: dict[str, Any]) -> int:
    return sum(1 for message in body.get("messages", []) if message.get("role") == "assistant")


def main() -> None:
    port, turns = int(sys.argv[1]), int(sys.argv[2])

    def respond(body: dict[str, Any]) -> Reply:
        n = replies_so_far(body)
        if n + 1 >= turns:
            return Reply(tool_calls=[tool("finish", summary="done")])
        return Reply(tool_calls=[tool("shell_exec", command=f"echo step {n + 1}")])

    server = ScriptedServer(respond, dialect="llama", n_ctx=32768)
    server.start(port)
    print(f"serving on {server.url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
