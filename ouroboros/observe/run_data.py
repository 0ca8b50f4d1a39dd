"""A run's logs as the report draws them: its model calls, sessions and marked events."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ouroboros.ground.jsonl import read_objects
from ouroboros.ground.state_folder import EVENTS, USAGE


@dataclass(frozen=True)
class Call:
    """One model call, as token_usage.jsonl recorded it."""

    index: int
    session: int
    turn: int
    ts: str
    prompt: int
    completion: int
    limit: int
    zone: str
    source: str
    cached: int | None = None
    processed: int | None = None
    prefill_ms: float | None = None
    hard_line: int | None = None
    """The hard line in force for the call (None: a log from before it was kept)."""
    budget: int = 0
    """The prompt budget: what every percentage a person reads is of, as the lines are."""

    @property
    def total(self) -> int:
        return self.prompt + self.completion


def cache_figures(calls: list[Call]) -> tuple[float, float | None] | None:
    """The share of prompt tokens the server's cache held, and the mean prefill time in ms,
    over the calls whose server said; None when none did."""
    known = [c for c in calls if c.cached is not None and c.processed is not None]
    cached = sum(c.cached or 0 for c in known)
    whole = cached + sum(c.processed or 0 for c in known)
    if not whole:
        return None
    timed = [c.prefill_ms for c in known if c.prefill_ms is not None]
    return cached / whole, (sum(timed) / len(timed) if timed else None)


@dataclass
class SessionSummary:
    number: int
    calls: list[Call] = field(default_factory=list)
    started: str = ""
    start_reason: str = ""
    masks: int = 0
    masked_results: int = 0
    wind_downs: int = 0
    compactions: int = 0
    ends: list[str] = field(default_factory=list)
    """Every session_end of this session, oldest first (a run limit, then a resume, then...)."""
    side_calls: list[Call] = field(default_factory=list)
    """Calls outside the conversation (compactions' recaps): their tokens count, not plotted."""

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt for c in self.calls + self.side_calls)

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion for c in self.calls + self.side_calls)

    @property
    def peak(self) -> Call | None:
        return max(self.calls, key=lambda c: c.total / max(1, c.budget), default=None)


@dataclass(frozen=True)
class Mark:
    """An event placed on the chart: `x` is in call indices (x.5 = between two calls)."""

    x: float
    kind: str
    label: str


@dataclass(frozen=True)
class RunData:
    state_dir: Path
    calls: list[Call]
    sessions: list[SessionSummary]
    marks: list[Mark]
    events: list[dict[str, Any]]
    skipped: list[str]
    """Lines that are not JSON records."""


def _call(index: int, r: dict[str, Any]) -> Call:
    return Call(
        index,
        int(r.get("session", 0)),
        int(r.get("turn", 0)),
        str(r.get("ts", "")),
        int(r.get("prompt_tokens", 0)),
        int(r.get("completion_tokens", 0)),
        int(r.get("context_limit", 0)),
        str(r.get("zone", "normal")),
        str(r.get("source", "")),
        r.get("cached_tokens"),
        r.get("processed_tokens"),
        r.get("prefill_ms"),
        r.get("hard_line"),
        int(r.get("prompt_budget") or r.get("context_limit") or 0),
    )


def _mark(event: dict[str, Any], x: float) -> Mark | None:
    kind = event["kind"]
    if kind == "context_mask":
        return Mark(
            x,
            kind,
            f"masked {event.get('masked')} result(s): next prompt ~{event.get('projected_before')}"
            f" -> ~{event.get('projected_after')} tokens",
        )
    if kind == "compaction":
        return Mark(
            x,
            kind,
            f"compacted {event.get('messages_replaced')} messages: "
            f"~{event.get('projected_before')} -> ~{event.get('projected_after')}",
        )
    if kind == "wind_down":
        return Mark(x, kind, f"wind-down: ~{event.get('projected')} ≥ {event.get('hard_line')}")
    if kind == "session_restart":
        return Mark(x, kind, f"restart {event.get('restarts')} ({event.get('reason')})")
    if kind in ("context_overflow", "silent_truncation"):
        return Mark(x, kind, f"{kind}: {event.get('message', '')}"[:200])
    if kind == "run_end" and event.get("reason") == "error":
        return Mark(x, "error", f"error: {event.get('detail', '')}"[:200])
    return None


def _sessions(
    calls: list[Call], side_calls: list[Call], events: list[dict[str, Any]]
) -> list[SessionSummary]:
    sessions: dict[int, SessionSummary] = {}

    def get(number: int) -> SessionSummary:
        return sessions.setdefault(number, SessionSummary(number))

    for call in calls:
        get(call.session).calls.append(call)
    for call in side_calls:
        get(call.session).side_calls.append(call)
    for e in events:
        number = e.get("session")
        if not isinstance(number, int):
            continue
        kind, s = e["kind"], get(number)
        if kind == "session_start" and not s.started:
            s.started, s.start_reason = str(e["ts"]), str(e.get("reason", ""))
        elif kind == "context_mask":
            s.masks += 1
            s.masked_results += int(e.get("masked", 0))
        elif kind == "wind_down":
            s.wind_downs += 1
        elif kind == "compaction":
            s.compactions += 1
        elif kind in ("session_end", "run_end"):
            detail = f" ({e['detail']})" if e.get("detail") else ""
            s.ends.append(f"{e.get('reason')}{detail}")
    return [sessions[n] for n in sorted(sessions)]


def _records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of one log, and the lines skipped (these logs are for reading, the journal
    is the record)."""
    records, problems = read_objects(path)
    return records, [str(p) for p in problems]


def load(state_dir: Path) -> RunData:
    usage_records, skipped = _records(state_dir / USAGE)
    events, skipped_events = _records(state_dir / EVENTS)
    usage = [r for r in usage_records if r.get("kind") == "token_usage"]
    # The curve is the conversation's context; side calls (a recap request) are other prompts.
    calls = [_call(i, r) for i, r in enumerate(r for r in usage if not r.get("purpose"))]
    side_calls = [_call(-1, r) for r in usage if r.get("purpose")]
    stamps = [c.ts for c in calls]
    marks = []
    for event in events:
        before = bisect.bisect_right(stamps, str(event.get("ts", "")))
        if (mark := _mark(event, max(before - 0.5, -0.5))) is not None:
            marks.append(mark)
    sessions = _sessions(calls, side_calls, events)
    return RunData(state_dir, calls, sessions, marks, events, skipped + skipped_events)
