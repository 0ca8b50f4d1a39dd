"""What every journal record has: the schema version and when it was written (`records.py`
lists the kinds)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 2
"""Written in every line. 1: before typed records (folds the same)."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Record(BaseModel):
    # A field a later version removed is ignored rather than refused: old journals still fold.
    model_config = ConfigDict(frozen=True, extra="ignore")
    v: int = SCHEMA_VERSION
    ts: str = Field(default_factory=now_iso)


def wall_time(started_at: float | None, now: float, stopped_at: str | None = None) -> float:
    """A run's wall time, the one definition its limit and `status` share: from its first start
    to `now` while it runs; once it stopped (ended, or killed), to its newest record
    (`stopped_at`, an ISO timestamp), whoever reads it and whenever."""
    if started_at is None:
        return 0.0
    end = now if stopped_at is None else datetime.fromisoformat(stopped_at).timestamp()
    return max(0.0, end - started_at)
