"""Rebuild where a run stands from its journal: the journal is the truth, this is a fold over it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ouroboros.journal import JsonlWriter, read_jsonl, repair_torn_tail, storage
from ouroboros.ledger import Measurement
from ouroboros.messages import MESSAGE_ADAPTER, AssistantMessage, Message, UserMessage

RESTARTING_REASONS = ("context_full", "context_overflow", "max_turns")
"""Session ends after which the supervisor starts another session."""


@dataclass
class RunState:
    started_at: float | None = None
    session: int = 0
    session_open: bool = False
    session_turns: int = 0
    total_turns: int = 0
    total_prompt_tokens: int = 0
    total_completion_tokens: int = 0
    restarts: int = 0
    messages: list[Message] = field(default_factory=list)
    """The current (or just ended) session's messages."""
    masked: set[str] = field(default_factory=set)
    cuts: dict[str, int] = field(default_factory=dict)
    """Results of this session shown cut after the server refused a prompt: bytes by call id."""
    started_calls: set[str] = field(default_factory=set)
    measurements: list[Measurement] = field(default_factory=list)
    """Every model call of the run, oldest first (they calibrate the estimator)."""
    wind_down_reply_tokens: list[tuple[int, int]] = field(default_factory=list)
    """Every reply the agent gave after a wind-down message in the run: which one it was after
    the message (1, 2, ...) and its completion tokens."""
    compaction: tuple[int, Message] | None = None
    """This session's latest compaction: the first history index kept, and the snapshot."""
    wind_down_replies: int | None = None
    """Replies the agent gave since this session's wind-down message; None before it."""
    ended_reason: str | None = None
    """Why the last session ended, while no next session has started."""
    run_end: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.total_prompt_tokens + self.total_completion_tokens


def _apply_message(state: RunState, record: dict[str, Any]) -> None:
    message = MESSAGE_ADAPTER.validate_python(record["message"])
    state.messages.append(message)
    # Counted as records arrive, so no turn has to scan the session for it.
    if isinstance(message, UserMessage) and message.origin == "wind_down":
        state.wind_down_replies = 0
    elif isinstance(message, AssistantMessage) and state.wind_down_replies is not None:
        state.wind_down_replies += 1
    if "usage" in record:
        # A turn is a model reply with its usage: carried-over assistant messages are none.
        m = _measurement(record["usage"])
        state.measurements.append(m)
        if state.wind_down_replies is not None:
            state.wind_down_reply_tokens.append((state.wind_down_replies, m.completion_tokens))
        state.total_prompt_tokens += m.prompt_tokens
        state.total_completion_tokens += m.completion_tokens
        state.session_turns += 1
        state.total_turns += 1


def _measurement(fields: dict[str, Any]) -> Measurement:
    return Measurement(**{k: fields[k] for k in Measurement.__dataclass_fields__ if k in fields})


def _start_session(state: RunState, record: dict[str, Any]) -> None:
    if state.session:
        state.restarts += 1
    state.session = record["session"]
    state.session_open = True
    state.session_turns = 0
    state.messages = [MESSAGE_ADAPTER.validate_python(m) for m in record["messages"]]
    state.masked = set()
    state.cuts = {}
    state.started_calls = set()
    state.wind_down_replies = None
    state.compaction = None
    state.ended_reason = None


def _apply(state: RunState, record: dict[str, Any]) -> None:
    kind = record["kind"]
    if kind == "run_start" and state.started_at is None:
        state.started_at = datetime.fromisoformat(record["ts"]).timestamp()
    elif kind == "session_start":
        _start_session(state, record)
    elif kind == "message":
        _apply_message(state, record)
    elif kind == "tool_started":
        state.started_calls.add(record["call_id"])
    elif kind == "mask":
        state.masked.update(record["call_ids"])
    elif kind == "cut":
        state.cuts.update(record["cuts"])
    elif kind == "refused":  # a prompt the server refused, with its exact count: no turn
        state.measurements.append(_measurement(record))
    elif kind == "compaction":
        state.compaction = (record["start"], MESSAGE_ADAPTER.validate_python(record["snapshot"]))
    elif kind == "usage":  # a call outside the conversation (compaction): tokens, no turn
        state.total_prompt_tokens += record["prompt_tokens"]
        state.total_completion_tokens += record["completion_tokens"]
    elif kind == "session_end":
        state.session_open = False
        state.ended_reason = record["reason"]
    elif kind == "run_end":
        state.run_end = record["reason"]


def replay(records: list[dict[str, Any]]) -> RunState:
    state = RunState()
    for record in records:
        _apply(state, record)
    return state


class Journal:
    """The durable record of the run and the state folded from it, always in step."""

    def __init__(self, path: Path):
        read = read_jsonl(path)
        with storage(path):
            self.torn_aside = repair_torn_tail(path, read)
        self.state = replay(read.records)
        self._writer = JsonlWriter(path, durable=True)

    def record(self, kind: str, **fields: Any) -> None:
        """Write (and fsync) first, then apply: nothing depends on a step before it is on disk."""
        _apply(self.state, self._writer.append(kind, **fields))

    def close(self) -> None:
        self._writer.close()
