"""`status.json`: where the run stands, so that `status` reads one small file instead of folding
the journal.

Made only from the journal: after each record, from the lines the record makes
(`lines.lines_of`) and the state folded so far, by the same `update` that `status` folds the
journal with when the file is missing, older than the journal's last record (a kill between
the two writes) or of another format. Written atomically (a crash leaves the old one or the new
one). Light to import: plain JSON, no models.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ouroboros.ground.errors import unwritable
from ouroboros.ground.state_folder import JOURNAL, SUMMARY

if TYPE_CHECKING:
    from ouroboros.state.fold import RunState

SUMMARY_FORMAT = 3
"""3: with the newest record's time (`last_ts`), where a stopped run's wall time ends."""
MAX_WARNINGS = 3


def of_state(state: RunState) -> dict[str, Any]:
    """What `status` needs of the run's folded state, as plain JSON."""
    end = state.run_end
    prefill = state.prefill
    return {
        "started_at": state.started_at,
        "last_ts": state.last_ts,
        "session": state.session,
        "session_open": state.session_open,
        "ended_reason": None if state.ended_reason is None else str(state.ended_reason),
        "session_turns": state.session_turns,
        "total_turns": state.total_turns,
        "restarts": state.restarts,
        "prompt_tokens": state.total_prompt_tokens,
        "completion_tokens": state.total_completion_tokens,
        "prefill": {
            "calls": prefill.calls,
            "cached_tokens": prefill.cached_tokens,
            "processed_tokens": prefill.processed_tokens,
            "timed_calls": prefill.timed_calls,
            "prefill_ms": prefill.prefill_ms,
        },
        "run_end": None
        if end is None
        else {"reason": str(end.reason), "detail": end.detail, "ts": end.ts},
        "loops": {
            "detections": state.loops.detections,
            "restarts": state.loops.restarts,
            "latest": None
            if state.loops.latest is None
            else state.loops.latest.model_dump(include={"ts", "loop", "evidence", "level"}),
        },
        "limits": None if state.limits is None else state.limits.model_dump(),
        "window": None if state.window is None else state.window.model_dump(),
        "tool_calls": state.protocol.line(),
        "plan": state.plan.summary() if state.plan.changes else None,
        "tools": state.tools,
    } | {key: value for part in state.parts.values() for key, value in part.status().items()}


def update(data: dict[str, Any], lines: list[dict[str, Any]], state: RunState) -> None:
    """`data` after a record that made `lines` and left the run in `state`."""
    for line in lines:
        kind = line["kind"]
        if kind == "token_usage":
            data["last_usage"] = line
            data["waiting"] = None
        elif kind == "retry":
            # A streak of retries is one wait: since its first, until a call gets through.
            waiting = data.get("waiting") or {"since": line["ts"]}
            waiting.update(
                attempt=line.get("attempt"),
                wait_s=line.get("wait_s"),
                ts=line["ts"],
                message=line.get("message"),
            )
            data["waiting"] = waiting
        elif kind == "warning":
            # What the run warned of (a smaller window than configured, a cache the server
            # drops): the newest few, for `status` to repeat.
            said = line.get("message")
            warnings = [w for w in data.get("warnings", []) if w.get("message") != said]
            data["warnings"] = [*warnings, line][-MAX_WARNINGS:]
        if kind not in ("token_usage", "tool_call"):
            data["last_event"] = line
        if kind in ("run_start", "run_end"):
            data["waiting"] = None
    data["run"] = of_state(state)


def fresh() -> dict[str, Any]:
    return {"format": SUMMARY_FORMAT}


class Summary:
    """The journal's last sink: `status.json` after each record."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / SUMMARY
        self.journal = state_dir / JOURNAL
        # Folded from the journal where this run's summary is not whole: a resume goes on
        # from what the journal says, not from a file a kill left behind it.
        self.data = read(state_dir) or folded(state_dir)[0]

    def record(self, lines: list[dict[str, Any]], state: RunState) -> None:
        update(self.data, lines, state)
        self.data["journal_bytes"] = self.journal.stat().st_size if self.journal.exists() else 0
        self.save()

    def save(self) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        # A summary that cannot be written would leave `status` telling an old story: the run
        # stops and says so (its records are on disk already).
        try:
            temporary.write_text(json.dumps(self.data, default=str))
            os.replace(temporary, self.path)
        except OSError as e:
            raise unwritable(self.path, e) from None


def read(state_dir: Path) -> dict[str, Any] | None:
    """The run's `status.json`, where it is of this format and as long as the journal (None:
    fold the journal)."""
    try:
        data = json.loads((state_dir / SUMMARY).read_text())
        size = (state_dir / JOURNAL).stat().st_size
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != SUMMARY_FORMAT:
        return None
    return data if data.get("journal_bytes") == size else None


def folded(state_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """`status.json` as the run would have written it, folded from its journal alone; and the
    journal's problems (lines skipped)."""
    from ouroboros.ground.jsonl import JsonlReader
    from ouroboros.sinks.lines import lines_of
    from ouroboros.state.fold import RunState
    from ouroboros.state.records import JOURNAL_RECORD

    data, state = fresh(), RunState()
    reader = JsonlReader(state_dir / JOURNAL)
    for record in reader.records(JOURNAL_RECORD):
        state.apply(record)
        update(data, lines_of(record, state), state)
    data["run"] = of_state(state)
    return data, [str(p) for p in reader.problems]
