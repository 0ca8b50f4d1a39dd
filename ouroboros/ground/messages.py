"""Typed conversation messages that round-trip through JSON (sent as `model/llm.py` `to_wire`
writes them)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    id: str
    name: str
    arguments: str
    """The raw JSON text the model produced (may be invalid: the tool runner says so)."""


class SystemMessage(_Frozen):
    kind: Literal["system"] = "system"
    content: str


class UserMessage(_Frozen):
    kind: Literal["user"] = "user"
    content: str
    origin: Literal[
        "user", "continue", "restart", "wind_down", "nudge", "compaction", "operator"
    ] = "user"
    """Who put it there: the harness injects every message except `user`."""


class AssistantMessage(_Frozen):
    kind: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


class ToolMessage(_Frozen):
    kind: Literal["tool"] = "tool"
    tool_call_id: str
    name: str
    content: str
    error: bool = False
    """The call failed (bad arguments, a refused path, an exception): `content` says why."""
    exit_code: int | None = None
    """For `shell_exec`: kept so a masked placeholder can still say how the command ended."""
    arguments: str = ""
    """The call's arguments, kept so a placeholder can name the file it read."""
    masked: bool = False
    """This is a placeholder standing for the result (never sent: the model sees the text)."""
    output_bytes: int | None = None
    """Size of the whole output before any cap (None in journals written before it was kept)."""
    output_lines: int | None = None
    saved_to: str | None = None
    """Where in the workspace the whole output was saved, when `content` does not hold it all."""
    room_bytes: int | None = None
    """`content` is the output at the run's normal cap; the session it ran in had room for only
    this many bytes, so it was shown cut to that (`context.truncate.shown`). A session with room
    shows it whole again."""


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="kind")
]
MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)


def tool_call_pairs_valid(messages: list[Message]) -> bool:
    """Every assistant tool call is followed by exactly its results, and no result is orphaned."""
    pending: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in pending:
                return False
            pending.discard(message.tool_call_id)
            continue
        if pending:
            return False
        if isinstance(message, AssistantMessage):
            pending = {c.id for c in message.tool_calls}
    return not pending
