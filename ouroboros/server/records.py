"""The managed model server's records (`process.py` reports each start and exit; the run
command journals them), and what the run keeps of them (`ServerPart`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ouroboros.server.view import exit_text
from ouroboros.state.fold import Part, RunState
from ouroboros.state.records import Record, Starting


class ServerStarted(Record):
    """The run started its model server (`[server] command`); `restart` once it had stopped."""

    kind: Literal["server_started"] = "server_started"
    before_run_start = True
    pid: int
    log: str
    """Where its output goes (the state folder's `server.log`)."""
    restart: bool = False

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [(self.kind, self.model_dump(exclude={"v", "ts", "kind"}))]


class ServerExited(Record):
    """The managed server stopped: by itself, killed (by the run for standing still, or by
    anyone), or stopped with the run."""

    kind: Literal["server_exited"] = "server_exited"
    before_run_start = True
    pid: int
    code: int | None
    signal: str | None
    up_s: float
    tail: str
    """The last lines of its log."""

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [(self.kind, self.model_dump(exclude={"v", "ts", "kind"}))]


@dataclass
class ServerPart(Part):
    """What `status` says of the managed server."""

    folds = (ServerStarted, ServerExited, Starting)

    pid: int | None = None
    up_since: str | None = None
    restarts: int = 0
    last_exit: str = ""

    def apply(self, record: Record, state: RunState) -> None:
        if isinstance(record, ServerStarted):
            self.pid, self.up_since = record.pid, record.ts
            self.restarts += record.restart
        elif isinstance(record, ServerExited):
            self.pid, self.up_since = None, None
            self.last_exit = exit_text(record.model_dump())
        elif isinstance(record, Starting):
            # A start of the run: a server a killed run left (never journalled as stopped) is
            # gone, or about to be (`kill_orphan`).
            self.pid, self.up_since = None, None

    def status(self) -> dict[str, Any]:
        if self.up_since is None and not self.last_exit:
            return {}
        return {
            "server": {
                "pid": self.pid,
                "up_since": self.up_since,
                "restarts": self.restarts,
                "last_exit": self.last_exit,
            }
        }
