"""The time as records and logs write it (ISO 8601, UTC, to the millisecond), and a run's wall
time from it: light, for the commands that only read a run (`status`) as for the run itself."""

from __future__ import annotations

from datetime import UTC, datetime


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def wall_time(started_at: float | None, now: float, stopped_at: str | None = None) -> float:
    """A run's wall time, the one definition its limit and `status` share: from its first start
    to `now` while it runs; once it stopped (ended, or killed), to its newest record
    (`stopped_at`, an ISO timestamp), whoever reads it and whenever."""
    if started_at is None:
        return 0.0
    end = now if stopped_at is None else datetime.fromisoformat(stopped_at).timestamp()
    return max(0.0, end - started_at)
