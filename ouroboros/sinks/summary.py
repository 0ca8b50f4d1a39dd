"""`status.json`: where the run stands, kept by a sink as records and log lines are written, so
that `status` reads one small file instead of folding the journal.

It is a cache of what the journal and the logs say: written atomically after each change (a crash
leaves the old one or the new one), and `status` folds the journal when it is missing. Light to
import: plain JSON, no models.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ouroboros.errors import unwritable

if TYPE_CHECKING:
    from ouroboros.records import JournalRecord
    from ouroboros.state import RunState

SUMMARY_FILE = "status.json"
SUMMARY_FORMAT = 1
MAX_WARNINGS = 3


def of_state(state: RunState) -> dict[str, Any]:
    """What `status` needs of the run's folded state, as plain JSON."""
    end = state.run_end
    prefill = state.prefill
    return {
        "started_at": state.started_at,
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
        "limits": None if state.limits is None else state.limits.model_dump(),
        "window": None if state.window is None else state.window.model_dump(),
    }


class Summary:
    """Kept by two hooks: the journal's sink (`record`) and the event log's (`line`)."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / SUMMARY_FILE
        self.data: dict[str, Any] = read(state_dir) or {"format": SUMMARY_FORMAT}

    def record(self, record: JournalRecord, state: RunState) -> None:
        self.data["run"] = of_state(state)
        self.data["pid"] = os.getpid()
        self.save()

    def line(self, line: dict[str, Any], save: bool = True) -> None:
        """A line of either log, as written (saved now unless its record will be)."""
        kind = line.get("kind")
        if kind == "token_usage":
            self.data["last_usage"] = line
            self.data["waiting"] = None
        elif kind == "retry":
            # A streak of retries is one wait: since its first, until a call gets through.
            waiting = self.data.get("waiting") or {"since": line.get("ts")}
            waiting.update(
                attempt=line.get("attempt"),
                wait_s=line.get("wait_s"),
                ts=line.get("ts"),
                message=line.get("message"),
            )
            self.data["waiting"] = waiting
        elif kind == "warning":
            # What the run warned of (a smaller window than configured, a cache the server
            # drops): the newest few, for `status` to repeat.
            warnings = [
                w for w in self.data.get("warnings", []) if w.get("message") != line.get("message")
            ]
            self.data["warnings"] = [*warnings, line][-MAX_WARNINGS:]
        if kind not in ("token_usage", "tool_call"):
            self.data["last_event"] = line
        if kind in ("run_start", "run_end"):
            self.data["waiting"] = None
        if save:
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
    try:
        data = json.loads((state_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == SUMMARY_FORMAT else None
