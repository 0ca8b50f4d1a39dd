"""The byte limit on every response the model client reads.

Every response body the model client reads is counted as it arrives and stopped at
`llm.max_reply_bytes`: the openai client buffers a server-sent event's line whole, however long,
and a reply's text grows with every chunk, so a server that streams without end would take all
memory. The client asks for the body uncompressed; a server that compresses it anyway (gzip,
deflate) has it decoded here, step by bounded step, and what is counted is what is decoded (65
KB of gzip can hold 64 MB of text). Other encodings are refused. The transport only: what a
reply cut at the limit means (one stopped at `max_tokens`) is the client's (`llm.py`).
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import openai

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_STEP = 1 << 16
"""Bytes decoded at a time: a bomb is never more than this past the limit in memory."""


EVENT_HEAD = 512
"""Bytes kept of the event the limit falls in: enough to name the tool call it was."""


class ReplyTooLarge(Exception):
    """A response went past the byte limit; reading stopped there, inside an event (a line of a
    stream) begun with `event_head`, of which `event_bytes` were read."""

    def __init__(self, limit: int, event_head: bytes = b"", event_bytes: int = 0):
        super().__init__(f"the response went past {limit:,} bytes")
        self.limit = limit
        self.event_head = event_head
        self.event_bytes = event_bytes


class _Event:
    """The start and size of the server-sent event being read (events end in a blank line,
    which may come in two reads)."""

    def __init__(self) -> None:
        self.head, self.size, self.tail = b"", 0, b""

    def add(self, part: bytes) -> None:
        # The last bytes read before are searched too: the bytes of a blank line split between
        # two reads. What follows a blank line found among them is of this event, counted anew.
        seen = self.tail + part
        end, width = max((seen.rfind(blank), len(blank)) for blank in _BLANK_LINES)
        if end >= 0:
            part = seen[end + width :]
            self.head, self.size = b"", 0
        self.head += part[: EVENT_HEAD - len(self.head)]
        self.size += len(part)
        self.tail = seen[-3:]


_BLANK_LINES = (b"\n\n", b"\r\n\r\n")


class LimitedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, encoding: str):
        self.inner = inner
        self.limit = limit
        self.encoding = encoding

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read, event = 0, _Event()
        async for part in self._decoded():
            read += len(part)
            if read > self.limit:
                event.add(part[: len(part) - (read - self.limit)])
                raise ReplyTooLarge(self.limit, event.head, event.size)
            event.add(part)
            yield part

    async def _decoded(self) -> AsyncIterator[bytes]:
        if self.encoding in ("", "identity"):
            async for part in self.inner:
                yield part
            return
        if self.encoding not in _WBITS:
            raise ValueError(
                f"the server compressed its reply as {self.encoding!r}, although asked not to"
            )
        decoder = zlib.decompressobj(_WBITS[self.encoding])
        async for part in self.inner:
            while part:
                try:
                    yield decoder.decompress(part, _STEP)
                except zlib.error as e:
                    raise ValueError(f"the {self.encoding} reply is damaged: {e}") from None
                part = decoder.unconsumed_tail

    async def aclose(self) -> None:
        await self.inner.aclose()


def limited_client(limit: int) -> httpx2.AsyncClient:
    """An HTTP client for the openai client whose responses stop at `limit` bytes."""

    async def bound(response: httpx2.Response) -> None:
        if isinstance(response.stream, httpx2.AsyncByteStream):
            # Decoded here, so that what is counted is what the client would hold.
            encoding = response.headers.pop("content-encoding", "").strip().lower()
            response.stream = LimitedStream(response.stream, limit, encoding)

    hooks: dict[str, list[Callable[[httpx2.Response], Awaitable[None]]]] = {"response": [bound]}
    identity = {"Accept-Encoding": "identity"}
    return openai.DefaultAsyncHttpxClient(event_hooks=hooks, headers=identity)
