"""One MCP server as the run sees it: connected at the run's start, each call bounded by
`call_timeout_s`, every failure one line, and started again at its next call after a fault (at
most `mcp.max_server_starts` times a session). The SDK's session lives in a task of the run's
task group (`hub.py`) that holds the transport open; a fault there ends that task, never the run."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp import ClientSession
from mcp.client._transport import TransportStreams
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from ouroboros.ground.mcp_settings import McpServerSettings
from ouroboros.mcp.content import result_text
from ouroboros.mcp.listing import Listing, checked
from ouroboros.mcp.stdio import Fault
from ouroboros.tools.tool import ToolFailed

Opener = Callable[[Fault], AbstractAsyncContextManager[TransportStreams]]
"""A new transport to the server, noting its faults in the `Fault` given."""
LISTED_PAGES = 20
"""Pages of `tools/list` read at most (a server that pages forever is cut there)."""
GRACE_S = 2.0
"""Past the server's own call timeout, how long the harness waits before it gives up."""


def leaf(error: BaseException) -> BaseException:
    """The first exception a group holds (the SDK's task groups wrap what they raise)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def one_line(error: BaseException) -> str:
    """An exception as one line; its type where it says nothing; a path as the path (an
    `OSError`'s own text shows the repr of a `Path`)."""
    error = leaf(error)
    if isinstance(error, OSError) and error.strerror:
        named = "" if error.filename is None else f": {os.fsdecode(error.filename)}"
        return f"{error.strerror}{named}"[:300]
    said = " ".join(str(error).split())[:300]
    return said or type(error).__name__


class ServerDown(Exception):
    """The server could not be reached or gave up: the message says why, in one line."""


@dataclass
class _Live:
    session: ClientSession
    tools: list[types.Tool]
    scope: anyio.CancelScope
    ended: anyio.Event
    fault: Fault
    listing: Listing


class McpServer:
    def __init__(self, name: str, settings: McpServerSettings, opener: Opener, tg: TaskGroup):
        self.name, self.settings, self.opener, self.tg = name, settings, opener, tg
        self.live: _Live | None = None
        self.last_fault = ""
        self.left_out: list[str] = []
        """The tools its last listing left out (malformed), one line each."""

    async def connect(self) -> list[types.Tool]:
        """Start the server, shake hands and list its tools, within `startup_timeout_s`."""
        fault = Fault()
        waited = self.settings.startup_timeout_s
        try:
            with anyio.fail_after(waited + GRACE_S):
                self.live = await self.tg.start(self._hold, fault)
        except Exception as e:  # the server's input, whatever it was: one line
            late = isinstance(leaf(e), TimeoutError)
            said = fault.reason or (f"did not start in {waited:g} s" if late else one_line(e))
            stderr = fault.last_error_line()
            raise ServerDown(f"{said} ({stderr})" if stderr else said) from None
        self.left_out = list(self.live.listing.left_out)
        return self.live.tools

    async def _hold(self, fault: Fault, *, task_status: TaskStatus[_Live]) -> None:
        ended, started, listing = anyio.Event(), False, Listing()
        try:
            with anyio.CancelScope() as scope:
                async with self.opener(fault) as streams:
                    read, write = checked(streams, listing)
                    async with ClientSession(read, write) as s:
                        with anyio.fail_after(self.settings.startup_timeout_s):
                            await s.initialize()
                            tools = await _all_tools(s)
                        task_status.started(_Live(s, tools, scope, ended, fault, listing))
                        started = True
                        await anyio.sleep_forever()
        except Exception as e:
            if not started:
                raise
            fault.note(one_line(e))  # a fault after the start ends this task, not the run
        finally:
            ended.set()

    async def call(self, tool: str, arguments: dict[str, object]) -> types.CallToolResult:
        """The server's result; a fault drops the connection and raises `ServerDown`."""
        live = self.live
        if live is None:
            raise ServerDown(self.last_fault or "not connected")
        timeout = self.settings.call_timeout_s
        try:
            with anyio.fail_after(timeout + GRACE_S):
                return await live.session.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except TimeoutError:
            fault = f"did not answer in {timeout:g} s"
        except MCPError as e:
            if e.code == REQUEST_TIMEOUT:
                fault = f"did not answer in {timeout:g} s"
            elif e.code == CONNECTION_CLOSED:
                fault = live.fault.reason or "closed the connection"
            else:  # the server refused the call (unknown tool, bad arguments): it is well
                raise ToolFailed(f"{self.name} refused the call: {one_line(e)}") from None
        except RuntimeError as e:
            if live.fault.reason is not None or live.ended.is_set():
                fault = live.fault.reason or "closed the connection"
            else:  # the SDK checked the result against the tool's `outputSchema`: it is well
                raise ToolFailed(
                    f"{self.name} answered off the tool's schema: {one_line(e)}"
                ) from None
        except Exception as e:  # a result that is not one, whatever else the server did
            fault = f"answered with what is not a tool result ({one_line(e)})"
        await self.drop(fault)
        raise ServerDown(fault)

    async def drop(self, fault: str) -> None:
        """End the connection (its process killed): the next call starts the server again."""
        live, self.live = self.live, None
        self.last_fault = fault
        if live is not None:
            live.scope.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await live.ended.wait()

    @property
    def broken(self) -> str | None:
        """Why the connection is of no more use (None while it is, or there is none)."""
        live = self.live
        if live is None:
            return None
        return live.fault.reason or ("ended" if live.ended.is_set() else None)

    async def close(self) -> None:
        await self.drop("stopped")


async def _all_tools(session: ClientSession) -> list[types.Tool]:
    listed = await session.list_tools()
    tools = list(listed.tools)
    for _ in range(LISTED_PAGES):
        if not listed.next_cursor:
            break
        listed = await session.list_tools(
            params=types.PaginatedRequestParams(cursor=listed.next_cursor)
        )
        tools += listed.tools
    return tools


def answer(result: types.CallToolResult) -> str:
    """The text of a result; an `is_error` one is a tool error."""
    text = result_text(result)
    if result.is_error:
        raise ToolFailed(text)
    return text
