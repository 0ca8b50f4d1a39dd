"""The scripted loopback server as a command, for runs whose `[server] command` starts it:

    python tests/scripted_command.py PORT TURNS [MARK]

serves a conversation of TURNS replies (`echo` calls, then `finish`), each chosen by how many
replies the request already holds, so a server started again goes on where the run is. With
MARK (a path), the second reply stands still in the middle of its stream once MARK is written,
unless MARK was there when the server started: a server killed then and started again answers.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

from ouroboros.model.scripted import Reply, ScriptedServer, tool


def replies_so_far(body: dict[str, Any]) -> int:
    return sum(1 for message in body.get("messages", []) if message.get("role") == "assistant")


def main() -> None:
    port, turns = int(sys.argv[1]), int(sys.argv[2])
    mark = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    stall = mark is not None and not mark.exists()

    def respond(body: dict[str, Any]) -> Reply:
        n = replies_so_far(body)
        if n + 1 >= turns:
            return Reply(tool_calls=[tool("finish", summary="done")])
        if n == 1 and stall and mark is not None:
            mark.write_text("mid-reply\n")
            return Reply(text="halfway", stall_s=600, tool_calls=[tool("shell_exec", command="x")])
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
