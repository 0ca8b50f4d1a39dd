"""A byte cap on every response the model client reads.

The openai client buffers a server-sent event's line whole, however long, and a reply's text
grows with every chunk: a server that streams without end would take all memory. So the
response body is counted as it arrives and cut at a cap (`llm.max_reply_bytes`); the caller
decides what a cut reply means. The client asks for the body uncompressed, so what is counted is
what is decoded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import openai


class ReplyTooLarge(Exception):
    """A response went past the byte cap; reading stopped there."""

    def __init__(self, limit: int):
        super().__init__(f"the response went past {limit:,} bytes")
        self.limit = limit


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int):
        self.inner = inner
        self.limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for part in self.inner:
            read += len(part)
            if read > self.limit:
                raise ReplyTooLarge(self.limit)
            yield part

    async def aclose(self) -> None:
        await self.inner.aclose()


def capped_client(limit: int) -> httpx2.AsyncClient:
    """An HTTP client for the openai client whose responses stop at `limit` bytes."""

    async def cap(response: httpx2.Response) -> None:
        if isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _CappedStream(response.stream, limit)

    hooks: dict[str, list[Callable[[httpx2.Response], Awaitable[None]]]] = {"response": [cap]}
    identity = {"Accept-Encoding": "identity"}
    return openai.DefaultAsyncHttpxClient(event_hooks=hooks, headers=identity)
