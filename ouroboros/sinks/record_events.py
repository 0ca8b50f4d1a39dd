"""What a record, just folded into the run's state, means to a reader: the events
(of `events.jsonl` and `token_usage.jsonl`) it makes (none for a record that means nothing to one).

Pure: the same journal folded again makes the same events, which is how `status` rebuilds from
the journal alone what the run's `status.json` says. Kinds and fields are in docs/logs.md.
"""

from __future__ import annotations

from functools import singledispatch
from typing import Any

from ouroboros.ground.messages import ToolMessage
from ouroboros.state.fold import RunState
from ouroboros.state.plan import plan_line
from ouroboros.state.records import (
    SCHEMA_VERSION,
    Compaction,
    CompactionFailed,
    Cut,
    EndReason,
    LoopDetected,
    Mask,
    MessageRecord,
    Notice,
    Record,
    RunEnd,
    RunStart,
    SessionEnd,
    SessionStart,
    SideCall,
    ToolRun,
    WindDown,
    WindowChange,
)

USAGE_KIND = "token_usage"
"""The kind of the events of `token_usage.jsonl`; every other kind goes to `events.jsonl`."""

Event = dict[str, Any]
"""An event as written, less its `seq` (the order of writing, which the writer numbers)."""


def events_of(record: Record, state: RunState) -> list[Event]:
    return [
        {"v": SCHEMA_VERSION, "ts": record.ts, "kind": kind, **fields}
        for kind, fields in _events(record, state)
    ]


@singledispatch
def _events(record: Record, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    return record.events()  # a feature's record says its own


@_events.register
def _(record: MessageRecord, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    made = []
    if record.usage is not None:
        calls = len(getattr(record.message, "tool_calls", ()))
        made.append(token_usage(record.session, record.usage.model_dump(), state, calls))
        if record.calls_from_text is not None:
            made[-1][1]["calls_from_text"] = record.calls_from_text
    if record.tool is not None and isinstance(record.message, ToolMessage):
        made += tool_call(record.session, record.message, record.tool, state)
    if record.plan is not None:
        made.append(("plan", plan_line(record, state.plan)))
    return made


@_events.register
def _(record: SideCall, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    return [token_usage(record.session, record.usage.model_dump(), state)]


@_events.register
def _(record: Notice, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    said = {"message": record.message} if record.message else {}
    where = {} if record.session is None else {"session": record.session}
    return [(record.event, {**said, **where, **record.details})]


@_events.register
def _(record: CompactionFailed, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "compaction_failed",
            {
                "session": record.session,
                "message": record.message,
                "projected_before": record.projected_before,
                "projected_after": record.projected_after,
            },
        )
    ]


@_events.register
def _(record: Mask, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    before, after = record.projected_before, record.projected_after
    fields = {
        "session": record.session,
        "masked": len(record.call_ids),
        "reason": record.reason,
        "total_masked": len(state.view.masked_ids),
        "projected_before": before,
        "projected_after": after,
        "estimated_reclaimed": None if before is None or after is None else before - after,
        "processed_again": record.processed_again,
    }
    return [("context_mask", fields)]


@_events.register
def _(record: Cut, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    shown = sum(record.cuts.values())
    return [
        (
            "context_cut",
            {
                "session": record.session,
                "results": len(record.cuts),
                "shown_bytes": shown,
                "reason": record.reason,
            },
        )
    ]


@_events.register
def _(record: Compaction, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    fields = {
        "session": record.session,
        "forced": record.forced,
        "messages_replaced": record.start - 1,
        "projected_before": record.projected_before,
        "projected_after": record.projected_after,
    }
    return [("compaction", fields)]


@_events.register
def _(record: WindDown, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    return [("wind_down", record.model_dump(exclude={"v", "ts", "kind", "message"}))]


@_events.register
def _(record: LoopDetected, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    fields = record.model_dump(exclude={"v", "ts", "kind", "message"})
    return [("loop", {**fields, "detections": state.loops.detections})]


@_events.register
def _(record: SessionStart, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    made: list[tuple[str, dict[str, Any]]] = []
    if record.session > 1:
        restart = {
            "session": record.session,
            "previous_turns": record.previous_turns,
            "carried_messages": record.carried,
            "reason": record.reason,
            "restarts": state.restarts,
        }
        made.append(("session_restart", restart))
    made.append(("session_start", {"session": record.session, "reason": record.reason}))
    return made


@_events.register
def _(record: SessionEnd, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    return [("session_end", record.model_dump(exclude={"v", "ts", "kind"}))]


@_events.register
def _(record: RunStart, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    session = {"session": state.session} if state.session else {}  # none before the first
    made = [("run_start", {"model": record.model, "resumed": record.resumed, **session})]
    if record.window is not None:
        made.append(("context_window", record.window.model_dump()))
    return made


@_events.register
def _(record: WindowChange, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    changed = {"session": record.session, "before": record.before, "source": record.source}
    return [("context_window", {**record.window.model_dump(), **changed})]


@_events.register
def _(record: RunEnd, state: RunState) -> list[tuple[str, dict[str, Any]]]:
    made: list[tuple[str, dict[str, Any]]] = []
    if record.reason == EndReason.ERROR:
        # `fatal`: the error that ended the run (the CLI says it on stderr), not one it lived on.
        made.append(("error", {"message": record.detail, "fatal": True}))
    end = {
        "reason": record.reason,
        "detail": record.detail,
        "session": state.session,
        "turns": state.total_turns,
    }
    return [*made, ("run_end", end)]


def token_usage(
    session: int, figures: dict[str, Any], state: RunState, calls: int = 0
) -> tuple[str, dict[str, Any]]:
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
        # The line in force for this call (placed from the run's replies), where it was kept.
        in_force = figures.get("hard_line")
        line["hard_line"] = state.window.hard_line if in_force is None else in_force
    return USAGE_KIND, line


def tool_call(
    session: int, message: ToolMessage, run: ToolRun, state: RunState
) -> list[tuple[str, dict[str, Any]]]:
    shown = state.view.shown[-1]
    call = {
        "session": session,
        "turn": state.session_turns,
        "call_id": message.tool_call_id,
        "name": message.name,
        "result_tokens": state.ledger.calibration.message_tokens(shown),
        "arguments_bytes": len(message.arguments.encode()),
        "duration_s": run.duration_s,
        "exit_code": message.exit_code,
        "output_bytes": run.output_bytes,
        "error": run.error,
    }
    made = [("tool_call", call)]
    kept = len(shown.content.encode())
    if kept < run.output_bytes:
        cut = {
            "session": session,
            "name": message.name,
            "original_bytes": run.output_bytes,
            "kept_bytes": kept,
        }
        made.append(("truncation", cut))
    if run.blocked:
        blocked = {"session": session, "rule": run.blocked, "arguments": message.arguments[:500]}
        made.append(("blocked_command", blocked))
    return made
