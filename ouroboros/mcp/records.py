"""The MCP client's journal records, and what the fold keeps of them (`McpTally`, the feature's
part of the run's state)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ouroboros.mcp.view import offered_text
from ouroboros.state.fold import Part, RunState
from ouroboros.state.records import Record


class McpOffered(Record):
    """The servers' tools as the run offers them: said at every start of the run."""

    kind: Literal["mcp_offered"] = "mcp_offered"
    before_run_start = True
    mode: Literal["direct", "search"]
    """`direct`: every tool's schema in every request; `search`: `mcp_find_tools` and
    `mcp_call` instead, the schemas being over `schema_share` of the prompt budget."""
    servers: dict[str, int]
    """Tools offered, by server (started ones only)."""
    schema_tokens: int
    """Raw tokens all the servers' schemas would add to every request."""
    offered_tokens: int
    """Raw tokens of what is offered instead: the schemas, or the two small tools."""
    share_tokens: int
    """`mcp.schema_share` of the prompt budget."""
    failed: dict[str, str] = {}
    """Servers that did not start, and why."""

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [(self.kind, self.model_dump(exclude={"v", "ts", "kind"}))]


class McpFault(Record):
    """A server hung, crashed, sent too much or what is not JSON-RPC: the call that met it got a
    one-line error, and the server is started again at its next call, at most
    `mcp.max_server_starts` times a session."""

    kind: Literal["mcp_fault"] = "mcp_fault"
    session: int
    server: str
    tool: str
    fault: str
    starts_left: int

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [(self.kind, self.model_dump(exclude={"v", "ts", "kind"}))]


@dataclass
class McpTally(Part):
    """What `status` says of MCP: the mode and its cost, and the faults."""

    folds = (McpOffered, McpFault)

    mode: str | None = None
    servers: dict[str, int] = field(default_factory=dict)
    schema_tokens: int = 0
    offered_tokens: int = 0
    share_tokens: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    faults: int = 0
    last_fault: str = ""

    def apply(self, record: Record, state: RunState) -> None:
        if isinstance(record, McpOffered):
            self.mode, self.servers = record.mode, dict(record.servers)
            self.schema_tokens, self.offered_tokens = record.schema_tokens, record.offered_tokens
            self.share_tokens, self.failed = record.share_tokens, dict(record.failed)
        elif isinstance(record, McpFault):
            self.faults += 1
            self.last_fault = f"{record.server} {record.fault}"

    def status(self) -> dict[str, Any]:
        return {"mcp": self.line()}

    def line(self) -> str | None:
        """`status`'s line: None for a run without servers."""
        if self.mode is None:
            return None
        faults = f"; {self.faults} fault(s), the last: {self.last_fault}" if self.faults else ""
        return offered_text(asdict(self)) + faults
