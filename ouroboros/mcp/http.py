"""A Streamable HTTP server through the SDK's client, given an HTTP client of ours whose JSON
answers are read with a cap: the SDK reads a JSON answer whole (a 200 MB one made a 2.9 GB peak),
and caps only server-sent events itself. An answer past `limit` bytes ends there; the SDK makes
it a parse error of the request it answered (a one-line error of that call, or of the start)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client

TIMEOUT = httpx2.Timeout(30.0, read=300.0)
"""The SDK's own client's: a server may hold an event stream open for long."""


class _CappedBody(httpx2.AsyncByteStream):
    def __init__(self, body: httpx2.AsyncByteStream, limit: int):
        self.body, self.limit = body, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self.body:
            read += len(chunk)
            if read > self.limit:
                raise httpx2.StreamError(f"sent a message over {self.limit >> 20} MB")
            yield chunk

    async def aclose(self) -> None:
        await self.body.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """JSON answers cut at `limit` bytes (event streams are the SDK's to cap, per event)."""

    def __init__(self, limit: int):
        self.inner, self.limit = httpx2.AsyncHTTPTransport(), limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_CappedBody(response.stream, self.limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def capped_http(url: str, limit: int) -> AsyncIterator[TransportStreams]:
    transport = CappedTransport(limit)
    async with (
        httpx2.AsyncClient(timeout=TIMEOUT, transport=transport) as client,
        streamable_http_client(url, http_client=client, max_sse_event_size=limit) as streams,
    ):
        yield streams
