"""The run's MCP servers once started (`lifecycle.mcp_servers`): their tools offered to the agent
as tools like the built-in ones (`McpHub.offer`), each call routed to its server and its faults
journalled (`McpHub.call`), its starts after faults bounded per session, every server stopped at
the end (`McpHub.close`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
from pydantic import BaseModel, ConfigDict

from ouroboros.context.tokens import tools_estimate
from ouroboros.ground.config import Settings
from ouroboros.mcp import catalogue
from ouroboros.mcp.catalogue import CALL_TOOL, FIND_TOOL, FindToolsArgs, McpCallArgs, McpTool
from ouroboros.mcp.names import tool_names
from ouroboros.mcp.records import McpFault, McpOffered
from ouroboros.mcp.schemas import fitted
from ouroboros.mcp.server import McpServer, ServerDown, answer
from ouroboros.mcp.spawn import Spawner
from ouroboros.state.journal import Journal
from ouroboros.tools.tool import Output, Tool, ToolContext, ToolFailed

if TYPE_CHECKING:
    from anyio.abc import TaskGroup


class McpArguments(BaseModel):
    """Whatever object the model sends: the server checks it against its own schema."""

    model_config = ConfigDict(extra="allow")


class McpHub:
    def __init__(self, settings: Settings, journal: Journal, tg: TaskGroup, spawner: Spawner):
        self.settings, self.journal = settings, journal
        self.servers: dict[str, McpServer] = {
            name: McpServer(name, server, spawner.opener(server), tg)
            for name, server in settings.mcp.servers.items()
            if server.enabled
        }
        self.listed: dict[str, list[mcp_types.Tool]] = {}
        """The tools of each server that started, as it listed them."""
        self.failed: dict[str, str] = {}
        self.tools: dict[str, McpTool] = {}
        self.starts: dict[tuple[str, int], int] = {}
        """Times each server was started again (after a fault, or after failing to start), by
        server and session."""
        self.mode: catalogue.Mode = "direct"
        self.taken: list[str] = []
        """The built-in tools' names, which no MCP tool takes."""
        self.tried_in = 0
        """The session in which the servers that did not start were last tried again."""

    async def start(self) -> None:
        async def connect(name: str, server: McpServer) -> None:
            try:
                self.listed[name] = await server.connect()
            except ServerDown as e:
                self.failed[name] = str(e)
                self.journal.notify("warning", f"MCP server {name} did not start: {e}")
                return
            self._say_left_out(name)

        async with anyio.create_task_group() as tg:
            for name, server in self.servers.items():
                tg.start_soon(connect, name, server)
        self.tried_in = max(1, self.journal.state.session)  # the run's start is this one's try

    def offer(self, taken: list[str], prompt_budget: int) -> list[Tool]:
        """The tools offered directly, or the two small tools when their schemas would take
        more than `mcp.schema_share` of the prompt budget; journalled (`McpOffered`). No tool
        takes a name in `taken` (the built-in tools')."""
        self.taken = taken
        self._catalogue(list(self.listed))
        tools = list(self.tools.values())
        tokens = catalogue.schema_tokens(tools)
        share = int(self.settings.mcp.schema_share * prompt_budget)
        mode = catalogue.mode_for(tokens, prompt_budget, self.settings.mcp.schema_share)
        self.mode = mode
        if mode == "direct":
            offered: list[Tool] = [_Direct(self, tool) for tool in tools]
        else:  # every configured server named, started or not: the prefix stays the same
            schemas = catalogue.search_schemas(list(self.servers))
            offered = [_Find(self, schemas[FIND_TOOL]), _Call(self, schemas[CALL_TOOL])]
        servers = {name: sum(t.server == name for t in tools) for name in self.listed}
        self.journal.append(
            McpOffered(
                mode=mode,
                servers=servers,
                schema_tokens=tokens,
                offered_tokens=tools_estimate([tool.schema() for tool in offered]),
                share_tokens=share,
                failed=self.failed,
            )
        )
        return offered

    def _catalogue(self, servers: list[str]) -> None:
        """The tools of these servers (as listed, less those the config leaves out) named and
        their schemas fitted, in `tools`."""
        configured = self.settings.mcp.servers
        wanted = [
            (name, tool)
            for name in self.servers
            if name in servers
            for tool in self.listed.get(name, [])
            if _kept(tool.name, configured[name].enabled_tools, configured[name].disabled_tools)
        ]
        taken = [*self.taken, *self.tools]
        names = tool_names([(server, t.name) for server, t in wanted], taken)
        for offered, (server, t) in zip(names, wanted, strict=True):
            parameters = fitted(t.input_schema)
            if parameters.cut:
                self.journal.notify(
                    "warning",
                    f"MCP tool {offered}: its input schema is too large once its $refs are "
                    "inlined; offered as taking any object (the server checks the arguments)",
                )
            self.tools[offered] = McpTool(
                offered, server, t.name, t.description or "", parameters.schema
            )

    async def start_failed(self) -> None:
        """At a session's first search, the servers that did not start are tried again (within
        `mcp.max_server_starts`); their tools are found from then on. Search mode only: in
        direct mode a new tool would change what every request offers."""
        session = self.journal.state.session
        if self.mode != "search" or not self.failed or self.tried_in == session:
            return
        self.tried_in = session
        for name in list(self.failed):
            used = self.starts.get((name, session), 0)
            if used >= self.settings.mcp.max_server_starts:
                continue
            self.starts[(name, session)] = used + 1
            try:
                self.listed[name] = await self.servers[name].connect()
            except ServerDown as e:
                self.failed[name] = str(e)
                self.journal.notify("warning", f"MCP server {name} did not start again: {e}")
                continue
            del self.failed[name]
            self._say_left_out(name)
            self._catalogue([name])
            found = sum(t.server == name for t in self.tools.values())
            self.journal.notify("tools", f"MCP server {name} started: {found} tools to find")

    def _say_left_out(self, name: str) -> None:
        for line in self.servers[name].left_out:
            self.journal.notify("warning", f"MCP server {name}: {line}")

    async def call(self, tool: McpTool, arguments: dict[str, Any]) -> Output:
        server = self.servers[tool.server]
        if (broken := server.broken) is not None:
            self._fault(tool, broken)
            await server.drop(broken)
        if server.live is None:
            await self._start_again(server, tool)
        try:
            result = await server.call(tool.tool, arguments)
        except ServerDown as e:
            left = self._fault(tool, str(e))
            again = "it starts again at the next call" if left else "not started again this session"
            raise ToolFailed(f"MCP server {tool.server} {e} ({again})") from None
        return Output(answer(result))

    def _fault(self, tool: McpTool, fault: str) -> int:
        session = self.journal.state.session
        used = self.starts.get((tool.server, session), 0)
        left = max(0, self.settings.mcp.max_server_starts - used)
        said = McpFault(
            session=session, server=tool.server, tool=tool.tool, fault=fault, starts_left=left
        )
        self.journal.append(said)
        return left

    async def _start_again(self, server: McpServer, tool: McpTool) -> None:
        key = (tool.server, self.journal.state.session)
        used = self.starts.get(key, 0)
        if used >= self.settings.mcp.max_server_starts:
            raise ToolFailed(
                f"MCP server {tool.server} is down ({server.last_fault}) and was started again "
                f"{used} time(s) this session: not again before the next session"
            )
        self.starts[key] = used + 1
        try:
            await server.connect()
        except ServerDown as e:
            self._fault(tool, f"did not start again: {e}")
            raise ToolFailed(f"MCP server {tool.server} did not start again: {e}") from None

    async def close(self) -> None:
        async with anyio.create_task_group() as tg:
            for server in self.servers.values():
                tg.start_soon(server.close)


class _Served(Tool):
    """A tool of the servers, offered with the schema given."""

    def __init__(self, hub: McpHub, schema: dict[str, Any]):
        self.hub, self.offered, self.name = hub, schema, schema["function"]["name"]

    def schema(self) -> dict[str, Any]:
        return self.offered


class _Direct(_Served):
    """A server's tool offered as it is, in every request."""

    args = McpArguments

    def __init__(self, hub: McpHub, tool: McpTool):
        super().__init__(hub, tool.schema())
        self.tool = tool

    async def run(self, args: McpArguments, context: ToolContext) -> Output:
        return await self.hub.call(self.tool, dict(args.model_extra or {}))


class _Find(_Served):
    args = FindToolsArgs

    async def run(self, args: FindToolsArgs, context: ToolContext) -> Output:
        await self.hub.start_failed()
        tools = list(self.hub.tools.values())
        return Output(catalogue.find_answer(tools, args.query, args.limit))


class _Call(_Served):
    args = McpCallArgs

    async def run(self, args: McpCallArgs, context: ToolContext) -> Output:
        await self.hub.start_failed()
        tool = self.hub.tools.get(args.name)
        if tool is None:
            raise ToolFailed(f"no MCP tool is named {args.name!r}: find one with {FIND_TOOL}")
        return await self.hub.call(tool, args.arguments)


def _kept(tool: str, enabled: list[str] | None, disabled: list[str]) -> bool:
    return (enabled is None or tool in enabled) and tool not in disabled
