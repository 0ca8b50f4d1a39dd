"""A server's `tools/list` answers checked tool by tool, between the transport and the SDK's
session: the SDK validates the whole list at once, so one malformed tool (no name, no or a
non-object `inputSchema`, a field of the wrong type) would leave out every tool of that server.
Here each tool is checked as the SDK would check a list of it alone; one that fails is left out
and noted in one line, and the session gets the others (its own listing, and the listing it asks
for again before a call, both go through here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

import mcp_types as types
from mcp.client._transport import ReadStream, TransportStreams, WriteStream
from mcp.shared.message import SessionMessage
from mcp_types import methods
from pydantic import ValidationError

BEFORE_HANDSHAKE = "2025-11-25"
"""The version the SDK checks results against before one is agreed (its own fallback)."""
WATCHED = ("initialize", "tools/list")


@dataclass
class Listing:
    """The requests whose answers are checked, and the tools left out so far, in one line each."""

    left_out: list[str] = field(default_factory=list)
    version: str = BEFORE_HANDSHAKE
    asked: dict[types.RequestId, str] = field(default_factory=dict)
    """The method of each request in flight that is watched, by its id."""

    def sent(self, message: SessionMessage) -> None:
        request = message.message
        if isinstance(request, types.JSONRPCRequest) and request.method in WATCHED:
            self.asked[request.id] = request.method

    def received(self, message: SessionMessage) -> SessionMessage:
        answer = message.message
        if not isinstance(answer, types.JSONRPCResponse | types.JSONRPCError):
            return message
        method = self.asked.pop(answer.id, None) if answer.id is not None else None
        if not isinstance(answer, types.JSONRPCResponse):
            return message
        agreed = answer.result.get("protocolVersion")
        if method == "initialize" and isinstance(agreed, str):
            self.version = agreed
        tools = answer.result.get("tools")
        if method != "tools/list" or not isinstance(tools, list):
            return message  # a list that is not one is the SDK's to refuse, whole
        kept = [tool for index, tool in enumerate(tools) if self._well_formed(index, tool)]
        if len(kept) == len(tools):
            return message
        result = {**answer.result, "tools": kept}
        return SessionMessage(answer.model_copy(update={"result": result}), message.metadata)

    def _well_formed(self, index: int, tool: Any) -> bool:
        alone = {"tools": [tool]}
        try:
            methods.validate_server_result("tools/list", self.version, alone)
            types.ListToolsResult.model_validate(alone, by_name=False)
        except ValidationError as e:
            self.left_out.append(f"{_named(index, tool)} left out: {_first_error(e)}")
            return False
        except (KeyError, ValueError):  # a version the SDK does not know: its own check refuses
            return True
        return True


def _named(index: int, tool: Any) -> str:
    name = tool.get("name") if isinstance(tool, dict) else None
    if isinstance(name, str) and name.strip():
        return f"tool {' '.join(name.split())[:64]!r}"
    return f"tool #{index + 1} of its list"


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"][2:])  # past ("tools", 0)
    said = " ".join(first["msg"].split())[:120]
    return f"{where}: {said}" if where else said


class _Closable(Protocol):
    async def aclose(self) -> None: ...


_Inner = TypeVar("_Inner", bound=_Closable)


class _Closing(Generic[_Inner]):
    """Closing either wrapped stream closes the transport's own."""

    inner: _Inner

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


class _CheckedRead(_Closing[ReadStream[SessionMessage | Exception]]):
    """The transport's read stream, each answer to a watched request checked on its way."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], listing: Listing):
        self.inner, self.listing = inner, listing

    @property
    def last_context(self) -> object:  # the SDK reads the sender's context from here, if any
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        item = await self.inner.receive()
        return item if isinstance(item, Exception) else self.listing.received(item)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        item = await self.inner.__anext__()
        return item if isinstance(item, Exception) else self.listing.received(item)


class _WatchedWrite(_Closing[WriteStream[SessionMessage]]):
    """The transport's write stream, noting the id of each watched request sent."""

    def __init__(self, inner: WriteStream[SessionMessage], listing: Listing):
        self.inner, self.listing = inner, listing

    async def send(self, item: SessionMessage, /) -> None:
        self.listing.sent(item)
        await self.inner.send(item)


def checked(streams: TransportStreams, listing: Listing) -> TransportStreams:
    """The transport's streams, its `tools/list` answers checked tool by tool (`Listing`)."""
    read, write = streams
    return _CheckedRead(read, listing), _WatchedWrite(write, listing)
