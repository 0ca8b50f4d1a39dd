"""What people watch: `events.jsonl`, `token_usage.jsonl`, and the same lines on the terminal.

Decisions and boundaries are journal records first; `EventLog.record` is the journal's sink
that turns them into events, so the two files always agree. News that changes no state (a
retry, a warning, a tool's timing) is emitted directly. Every line of both files carries one
`seq`, in the order they were written. Kinds and fields are documented in docs/logs.md.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import singledispatchmethod
from pathlib import Path
from typing import Any, Literal

from ouroboros.jsonl import JsonlWriter, last_line
from ouroboros.messages import ToolMessage
from ouroboros.observe.describe import stdout_console
from ouroboros.observe.live import LiveView
from ouroboros.observe.summary import Summary
from ouroboros.records import (
    SCHEMA_VERSION,
    Compaction,
    Cut,
    EndReason,
    JournalRecord,
    Mask,
    MessageRecord,
    Record,
    RunEnd,
    RunStart,
    SessionEnd,
    SessionStart,
    SideCall,
    ToolRun,
    WindDown,
    now_iso,
)
from ouroboros.state import RunState

EventKind = Literal[
    "run_start",
    "run_end",
    "session_start",
    "session_end",
    "session_restart",
    "context_window",
    "tools",
    "tool_call",
    "truncation",
    "context_mask",
    "context_cut",
    "compaction",
    "compaction_failed",
    "wind_down",
    "wind_down_missed",
    "silent_truncation",
    "context_overflow",
    "retry",
    "blocked_command",
    "warning",
    "error",
    "waiting",
]
USAGE_FILE = "token_usage.jsonl"
EVENTS_FILE = "events.jsonl"


class EventLog:
    """Writes both files and echoes each line, as `tail` shows it, to the terminal."""

    def __init__(self, state_dir: Path, view: LiveView | None = None):
        self.events = JsonlWriter(state_dir / EVENTS_FILE)
        self.usage = JsonlWriter(state_dir / USAGE_FILE)
        self.view = view or LiveView(stdout_console())
        lasts = [last_line(state_dir / name) or {} for name in (EVENTS_FILE, USAGE_FILE)]
        self.seq = max(int(line.get("seq", 0)) for line in lasts)
        self.summary = Summary(state_dir)
        self._in_record = False

    def sinks(self) -> list[Callable[[JournalRecord, RunState], None]]:
        """What the journal hands each record to: this log, then `status.json`."""
        return [self._sink]

    def _sink(self, record: JournalRecord, state: RunState) -> None:
        # The lines a record makes and the record itself go into `status.json` in one write.
        self._in_record = True
        try:
            self.record(record, state)
        finally:
            self._in_record = False
        self.summary.record(record, state)

    def emit(self, kind: EventKind, **fields: Any) -> None:
        self._write(self.events, kind, fields)

    def retry(self, attempt: int, wait_s: float, error: BaseException) -> None:
        """Tenacity's report before it sleeps: the terminal shows that the run waits, and why."""
        self.emit("retry", message=str(error)[:300], attempt=attempt, wait_s=round(wait_s, 2))

    def _write(self, writer: JsonlWriter, kind: str, fields: dict[str, Any]) -> None:
        self.seq += 1
        line = {"v": SCHEMA_VERSION, "seq": self.seq, "ts": now_iso(), "kind": kind, **fields}
        writer.append(line)
        self.summary.line(line, save=not self._in_record)
        self.view.line(line)

    @singledispatchmethod
    def record(self, record: Record, state: RunState) -> None:
        """The journal's sink: what a record, just folded into `state`, means to a reader
        (a record not listed here means nothing to one)."""

    @record.register
    def _(self, record: MessageRecord, state: RunState) -> None:
        if record.usage is not None:
            calls = len(getattr(record.message, "tool_calls", ()))
            self.token_usage(record.session, record.usage.model_dump(), state, calls)
        if record.tool is not None and isinstance(record.message, ToolMessage):
            self.tool_call(record.session, record.message, record.tool, state)

    @record.register
    def _(self, record: SideCall, state: RunState) -> None:
        self.token_usage(record.session, record.usage.model_dump(), state)

    @record.register
    def _(self, record: Mask, state: RunState) -> None:
        before, after = record.projected_before, record.projected_after
        self.emit(
            "context_mask",
            session=record.session,
            masked=len(record.call_ids),
            reason=record.reason,
            total_masked=len(state.view.masked_ids),
            projected_before=before,
            projected_after=after,
            estimated_reclaimed=None if before is None or after is None else before - after,
            processed_again=record.processed_again,
        )

    @record.register
    def _(self, record: Cut, state: RunState) -> None:
        shown = sum(record.cuts.values())
        self.emit(
            "context_cut", session=record.session, results=len(record.cuts), shown_bytes=shown
        )

    @record.register
    def _(self, record: Compaction, state: RunState) -> None:
        self.emit(
            "compaction",
            session=record.session,
            forced=record.forced,
            messages_replaced=record.start - 1,
            projected_before=record.projected_before,
            projected_after=record.projected_after,
        )

    @record.register
    def _(self, record: WindDown, state: RunState) -> None:
        self.emit("wind_down", **record.model_dump(exclude={"v", "ts", "kind", "message"}))

    @record.register
    def _(self, record: SessionStart, state: RunState) -> None:
        if record.session > 1:
            self.emit(
                "session_restart",
                session=record.session,
                previous_turns=record.previous_turns,
                carried_messages=record.carried,
                reason=record.reason,
                restarts=state.restarts,
            )
        self.emit("session_start", session=record.session, reason=record.reason)

    @record.register
    def _(self, record: SessionEnd, state: RunState) -> None:
        self.emit("session_end", **record.model_dump(exclude={"v", "ts", "kind"}))

    @record.register
    def _(self, record: RunStart, state: RunState) -> None:
        session = {"session": state.session} if state.session else {}  # none before the first
        self.emit("run_start", model=record.model, resumed=record.resumed, **session)
        if record.window is not None:
            self.emit("context_window", **record.window.model_dump())

    @record.register
    def _(self, record: RunEnd, state: RunState) -> None:
        if record.reason == EndReason.ERROR:
            self.emit("error", message=record.detail)
        self.emit(
            "run_end",
            reason=record.reason,
            detail=record.detail,
            session=state.session,
            turns=state.total_turns,
        )

    def token_usage(
        self, session: int, figures: dict[str, Any], state: RunState, calls: int = 0
    ) -> None:
        used = figures["prompt_tokens"] + figures["completion_tokens"]
        budget = state.window.prompt_budget if state.window else figures["context_limit"]
        line = {
            "session": session,
            **{k: v for k, v in figures.items() if k not in ("raw_kinds",) and v is not None},
            "total_tokens": used,
            "prompt_budget": budget,
            # Of the prompt budget, as the thresholds are: 0.9 is the configured hard line.
            "fraction": round(used / budget, 4) if budget else 0.0,
            "tool_calls": calls,
        }
        if state.window is not None and budget:
            line["soft_line"] = state.window.soft_line
            line["hard_line"] = state.window.hard_line
        self._write(self.usage, "token_usage", line)

    def tool_call(self, session: int, message: ToolMessage, run: ToolRun, state: RunState) -> None:
        shown = state.view.view[-1]
        self.emit(
            "tool_call",
            session=session,
            turn=state.session_turns,
            call_id=message.tool_call_id,
            name=message.name,
            result_tokens=state.ledger.calibration.message_tokens(shown),
            arguments_bytes=len(message.arguments.encode()),
            duration_s=run.duration_s,
            exit_code=message.exit_code,
            output_bytes=run.output_bytes,
            error=run.error,
        )
        kept = len(shown.content.encode())
        if kept < run.output_bytes:
            self.emit(
                "truncation",
                session=session,
                name=message.name,
                original_bytes=run.output_bytes,
                kept_bytes=kept,
            )
        if run.blocked:
            self.emit(
                "blocked_command",
                session=session,
                rule=run.blocked,
                arguments=message.arguments[:500],
            )

    def close(self) -> None:
        self.view.flush()
        self.events.close()
        self.usage.close()
