"""Streams a broken or hostile server sends, for the scripted server (`Reply.wire`): raw events
(anything as `data:`), a trickle of empty chunks that never ends a reply, a flood of content."""

from __future__ import annotations

import time
from typing import Any

from ouroboros.model.scripted import Stream, Wire


def chunk(delta: object = None, finish: object = None, **extra: object) -> dict[str, Any]:
    """One chat-completion chunk with one choice; any field may hold anything."""
    choice = {"index": 0, "delta": {} if delta is None else delta, "finish_reason": finish}
    return {"id": "chatcmpl-h", "object": "chat.completion.chunk", "choices": [choice], **extra}


def usage(**figures: object) -> dict[str, Any]:
    """The usage chunk (no choices), with these figures as they are."""
    return {"id": "chatcmpl-h", "object": "chat.completion.chunk", "choices": [], "usage": figures}


def call(index: object, call_id: object, name: object, arguments: object) -> dict[str, Any]:
    """A delta holding one tool call, its fields as given."""
    function = {"name": name, "arguments": arguments}
    entry = {"index": index, "id": call_id, "type": "function", "function": function}
    return {"tool_calls": [entry]}


def events(*payloads: object, done: bool = True) -> Wire:
    """These payloads as `data:` events: a str verbatim (`{not json` included), else as JSON."""

    def write(stream: Stream) -> None:
        for payload in payloads:
            stream.event(payload)
        stream.end(done)

    return write


def trickle(seconds: float, every: float = 1.0, text: str = "") -> Wire:
    """A delta of `text` (empty: a keep-alive) every `every` seconds for `seconds`: each read
    is quick, the reply ends only then."""

    def write(stream: Stream) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            stream.event(chunk({"content": text}))
            time.sleep(every)
        stream.event(chunk(finish="stop"))
        stream.end()

    return write


def flood(total_bytes: int, piece: int = 1 << 16) -> Wire:
    """Content deltas of `piece` characters until `total_bytes` were sent (or the client hangs
    up), then a normal end."""

    def write(stream: Stream) -> None:
        text = "x" * piece
        for _ in range(total_bytes // piece):
            stream.event(chunk({"content": text}))
        stream.event(chunk(finish="stop"))
        stream.end()

    return write


def one_line(size: int) -> Wire:
    """A single `data:` line of `size` bytes that never ends: no event is ever complete."""

    def write(stream: Stream) -> None:
        head = b"data: "
        stream.h.wfile.write(f"{len(head):x}\r\n".encode() + head + b"\r\n")
        block = b"x" * (1 << 16)
        for _ in range(size // len(block)):
            stream.h.wfile.write(f"{len(block):x}\r\n".encode() + block + b"\r\n")
        stream.end(done=False)

    return write
